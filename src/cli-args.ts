import {
  buildConfig,
  CONFIG_FIELDS,
  type ConfigField,
  type ConfigInput,
  checkFieldValue,
  describeRange,
  type RingserveConfig,
} from './config.js';
import { RS_ERR_CONFIG_INVALID } from './errors.js';

/**
 * The command-line parser for CONFIG_FIELDS, written here rather than taken from a package because
 * it is forty lines and must produce ringserve's coded errors. Accepted forms, as vLLM's argparse:
 * `--flag value`, `--flag=value`, booleans as `--flag` / `--no-flag` (or `--flag=true|false`).
 * The last occurrence of a flag wins. Anything else (unknown flags, positionals) is an error.
 */

const FIELD_BY_FLAG: ReadonlyMap<string, ConfigField> = new Map(
  CONFIG_FIELDS.map((f) => [f.flag, f]),
);

export type Env = Readonly<Record<string, string | undefined>>;

/** True when argv asks for --help / -h; the caller prints formatHelp() and exits 0. */
export function isHelpRequested(argv: readonly string[]): boolean {
  return argv.includes('--help') || argv.includes('-h');
}

/** Parse flags (argv without node, script and subcommand) and env into a validated, frozen config. */
export function parseArgs(argv: readonly string[], env: Env = process.env): RingserveConfig {
  const input: Record<string, unknown> = {};
  for (const field of CONFIG_FIELDS) {
    const fromEnv = field.env === undefined ? undefined : env[field.env];
    if (fromEnv !== undefined && fromEnv !== '') input[field.key] = parseFieldText(field, fromEnv);
  }
  let i = 0;
  while (i < argv.length) {
    const arg = argv[i] as string;
    i += 1;
    if (!arg.startsWith('--')) throw new RS_ERR_CONFIG_INVALID(arg, 'unexpected argument');
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const inline = eq === -1 ? undefined : arg.slice(eq + 1);
    const negated = name.startsWith('--no-') ? FIELD_BY_FLAG.get(`--${name.slice(5)}`) : undefined;
    if (negated?.kind === 'bool') {
      if (inline !== undefined) throw new RS_ERR_CONFIG_INVALID(name, 'takes no value');
      input[negated.key] = false;
      continue;
    }
    const field = FIELD_BY_FLAG.get(name);
    if (field === undefined) throw new RS_ERR_CONFIG_INVALID(name, 'unknown flag (see --help)');
    if (field.kind === 'bool' && inline === undefined) {
      input[field.key] = true;
      continue;
    }
    let text = inline;
    if (text === undefined) {
      text = argv[i];
      if (text === undefined || text.startsWith('--')) {
        throw new RS_ERR_CONFIG_INVALID(field.flag, `expects a value (${describeRange(field)})`);
      }
      i += 1;
    }
    input[field.key] = parseFieldText(field, text);
  }
  return buildConfig(input as ConfigInput);
}

const INT_TEXT = /^[+-]?\d+$/;
const NUMBER_TEXT = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/** Convert the text of one flag to its typed value and check it against the field's row. */
export function parseFieldText(field: ConfigField, text: string): unknown {
  const bad = (): never => {
    throw new RS_ERR_CONFIG_INVALID(field.flag, `must be ${describeRange(field)}, got "${text}"`);
  };
  let value: unknown = text;
  switch (field.kind) {
    case 'int':
      if (!INT_TEXT.test(text)) bad();
      value = Number(text);
      break;
    case 'number':
      if (!NUMBER_TEXT.test(text)) bad();
      value = Number(text);
      break;
    case 'bool':
      if (text !== 'true' && text !== 'false') bad();
      value = text === 'true';
      break;
    case 'enum':
      if (field.choices?.every((c) => typeof c === 'number') === true) {
        if (!INT_TEXT.test(text)) bad();
        value = Number(text);
      }
      break;
    case 'string':
      break;
  }
  try {
    // The shared validator, so a CLI value and a programmatic one pass or fail alike; the
    // message keeps the user's own text.
    checkFieldValue(field, value);
  } catch {
    bad();
  }
  return value;
}

/** The --help text, rendered from CONFIG_FIELDS so it cannot drift from what is parsed. */
export function formatHelp(command = 'ringserve serve'): string {
  const lines = [`usage: ${command} [flags]`, '', 'flags:'];
  const flagColumn = (f: ConfigField): string =>
    f.kind === 'bool'
      ? `${f.flag}, --no-${f.flag.slice(2)}`
      : `${f.flag} <${f.kind === 'enum' ? 'choice' : f.kind}>`;
  const width = Math.max(...CONFIG_FIELDS.map((f) => flagColumn(f).length)) + 2;
  for (const f of CONFIG_FIELDS) {
    const shown = f.default === null ? (f.derived ?? 'unset') : String(f.default);
    const env = f.env === undefined ? '' : `; env ${f.env}`;
    lines.push(`  ${flagColumn(f).padEnd(width)}${f.help}`);
    lines.push(`  ${''.padEnd(width)}default: ${shown}; ${describeRange(f)}${env}`);
  }
  lines.push(`  ${'--help, -h'.padEnd(width)}print this help and exit`);
  return `${lines.join('\n')}\n`;
}
