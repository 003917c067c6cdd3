/**
 * The mirror's codec, one import for every message kind of every era, both directions. Split by
 * direction and concept: codec-outputs (engine -> frontend), codec-requests and codec-sampling
 * (frontend -> engine), codec-handshake (startup), codec-arrays and codec-stats (nested values).
 */
export * from './codec-arrays.js';
export * from './codec-handshake.js';
export * from './codec-outputs.js';
export * from './codec-requests.js';
export * from './codec-sampling.js';
export * from './codec-stats.js';
export * from './eras.js';
export { Ext, f64, MsgFloat, pack, unpack } from './msgpack.js';
export * from './ndarray.js';
export { MirrorDecodeError } from './wire-types.js';
