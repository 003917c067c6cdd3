// The environment scripts/build-addon.mjs gives node-gyp. npm hands its settings to scripts as
// npm_config_<key> variables, and node-gyp reads those (and npm_package_config_node_gyp_<key>) after
// its command line, so they win over `--nodedir`: an npmrc's `nodedir=/usr` made `npm ci` under
// Node 24 compile against /usr's Node 20 headers (issue 17). Every option that picks the Node to
// compile for is dropped, and nodedir is set to the running Node's own prefix.

/** node-gyp options that choose the target Node (after lower-casing and `-` -> `_`). */
const TARGET_OPTIONS = new Set([
  'nodedir',
  'target',
  'target_arch',
  'arch',
  'runtime',
  'disturl',
  'dist_url',
  'tarball',
]);
const PREFIXES = ['npm_config_', 'npm_package_config_node_gyp_'];

/** The option a variable sets for node-gyp (`NPM_CONFIG_NODEDIR` -> `nodedir`), or null. */
function nodeGypOption(key) {
  const normal = key.toLowerCase().replaceAll('-', '_');
  const prefix = PREFIXES.find((p) => normal.startsWith(p));
  return prefix === undefined ? null : normal.slice(prefix.length);
}

/** `env` without any inherited target option, with nodedir = `prefix` (holding include/node). */
export function nodeGypEnv(env, prefix) {
  const clean = {};
  for (const [key, value] of Object.entries(env)) {
    if (!TARGET_OPTIONS.has(nodeGypOption(key))) clean[key] = value;
  }
  clean.npm_config_nodedir = prefix;
  return clean;
}
