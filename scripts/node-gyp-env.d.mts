/** `env` without any inherited node-gyp target option, with nodedir = `prefix`. */
export function nodeGypEnv(
  env: Readonly<Record<string, string | undefined>>,
  prefix: string,
): Record<string, string | undefined>;
