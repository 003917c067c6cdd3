import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RS_ERR_CONFIG_INVALID } from '../errors.js';

/** The package root (where package.json is), found from this module under src/ (vitest) or dist/src/. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir)
      throw new RS_ERR_CONFIG_INVALID('--tokenizer', 'no package root above src/tokenizer');
    dir = parent;
  }
  return dir;
}
