import { readFile } from 'node:fs/promises';
import { decodeGenerateBody } from '../../src/client/index.js';

/**
 * "Client parse ms": what an RL trainer pays to turn one answer into usable data. Packed and
 * msgpack answers are decoded to typed arrays by ringserve's client (src/client/); legacy answers
 * are parsed into the legacy objects (JSON.parse), which is all a stock-vLLM client does, so the
 * objects arms are charged no more than that. Bodies are decoded here, after the arm's cluster has
 * stopped, so the figure is the decode itself and not the contention of a loaded 2-core machine.
 */

const REPEATS = 3;

export interface ClientParse {
  /** Mean ms per body over REPEATS decodes, one entry per sampled body. */
  msPerBody: number[];
  /** Bodies that did not decode to the token count the server announced. */
  problems: string[];
}

const utf8 = new TextDecoder();

/** Decodes one body the way a client of this arm would; returns its completion token count. */
function decodeOnce(bytes: Uint8Array, contentType: string, legacy: boolean): number {
  if (legacy) {
    const parsed = JSON.parse(utf8.decode(bytes)) as { choices: { token_ids: number[] }[] };
    return parsed.choices[0]?.token_ids.length ?? -1;
  }
  return decodeGenerateBody(bytes, contentType).choices[0]?.tokenIds.length ?? -1;
}

export async function measureClientParse(
  samples: readonly { file: string; contentType: string; tokens: number }[],
  legacy: boolean,
): Promise<ClientParse> {
  const msPerBody: number[] = [];
  const problems: string[] = [];
  let warmedUp = false;
  for (const sample of samples) {
    const bytes = await readFile(sample.file).catch(() => null);
    if (bytes === null) {
      problems.push(`${sample.file}: not written`);
      continue;
    }
    try {
      // The first decode of a run warms the JIT and is not timed; a trainer decodes thousands.
      if (!warmedUp) decodeOnce(bytes, sample.contentType, legacy);
      warmedUp = true;
      let tokens = -1;
      const t0 = performance.now();
      for (let r = 0; r < REPEATS; r++) tokens = decodeOnce(bytes, sample.contentType, legacy);
      msPerBody.push((performance.now() - t0) / REPEATS);
      if (tokens !== sample.tokens) {
        problems.push(`a body decoded to ${tokens} tokens, usage said ${sample.tokens}`);
      }
    } catch (error) {
      problems.push(`a body did not decode: ${(error as Error).message}`);
    }
  }
  return { msPerBody, problems };
}
