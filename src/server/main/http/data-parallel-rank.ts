/**
 * vLLM's `X-data-parallel-rank` request header: the data-parallel engine rank a request must run
 * on. vLLM reads it in vllm/entrypoints/openai/engine/serving.py (`_get_data_parallel_rank`:
 * Python's int() of the value) and refuses a rank outside [0, data_parallel_size) with a 400
 * (vllm/v1/engine/input_processor.py). Here the value is a decimal integer, an optional sign and
 * surrounding whitespace allowed as int() allows them; anything else, and a rank outside
 * [0, --data-parallel-size), is a 400 naming the header (vLLM ignores a value int() cannot parse:
 * ringserve refuses it, so a typo cannot silently lose the pinning). Absent: the engine core picks.
 */
import { RS_ERR_REQ_INVALID_FIELD } from '../../../errors.js';

/** The header as Node keys it (HTTP header names are case-insensitive; Node lower-cases them). */
export const DP_RANK_HEADER = 'x-data-parallel-rank';
/** The name errors give it: vLLM's spelling. */
export const DP_RANK_FIELD = 'X-data-parallel-rank';
const INTEGER = /^[+-]?[0-9]{1,10}$/;

/** The rank the header names, or null when there is none; RS_ERR_REQ_INVALID_FIELD (400) if bad. */
export function dataParallelRank(
  header: string | string[] | undefined,
  dataParallelSize: number,
): number | null {
  if (header === undefined) return null;
  // A header sent twice arrives as one value joined by ", " (Node), or as an array: never a rank.
  const text = Array.isArray(header) ? header.join(',') : header.trim();
  const rank = INTEGER.test(text) ? Number(text) : Number.NaN;
  // "-0" is rank 0 (Number gives -0).
  if (Number.isInteger(rank) && rank >= 0 && rank < dataParallelSize) return rank === 0 ? 0 : rank;
  const range = `[0, ${dataParallelSize}) (--data-parallel-size ${dataParallelSize})`;
  throw new RS_ERR_REQ_INVALID_FIELD(
    DP_RANK_FIELD,
    Number.isInteger(rank)
      ? `data_parallel_rank ${rank} is out of range ${range}`
      : `must be an integer in ${range}, got ${JSON.stringify(text.slice(0, 40))}`,
  );
}
