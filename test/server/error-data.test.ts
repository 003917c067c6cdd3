// The one way coded errors cross between an API server's threads (src/errors.ts: errorToData,
// errorFromData): the packers' and the tokenizer thread's failed tasks, the output worker's error
// messages. The data goes through structured clone here, as postMessage sends it.
import { describe, expect, it } from 'vitest';
import {
  errorFromData,
  errorToData,
  RingserveError,
  RS_ERR_REQ_INVALID_FIELD,
  RS_ERR_SERVER_INTERNAL,
} from '../../src/errors.js';
import { RS_ERR_OUTPUT_NOT_FINISHED } from '../../src/server/cross-thread/errors.js';

const across = (err: unknown): RingserveError => errorFromData(structuredClone(errorToData(err)));

describe('coded errors between threads', () => {
  it('keep code, message, status and param, and their constructor where it is registered', () => {
    const sent = new RS_ERR_REQ_INVALID_FIELD('sampling_params.max_tokens', 'too long');
    const got = across(sent);
    expect(got).toBeInstanceOf(RS_ERR_REQ_INVALID_FIELD);
    expect(got).toMatchObject({
      code: sent.code,
      message: sent.message,
      statusCode: 400,
      param: 'sampling_params.max_tokens',
    });
    const notFinished = across(new RS_ERR_OUTPUT_NOT_FINISHED(3, 7));
    expect(notFinished).toBeInstanceOf(RS_ERR_OUTPUT_NOT_FINISHED);
    expect(notFinished).toMatchObject({ statusCode: 500, param: null });
  });

  it('send plain data only', () => {
    const data = errorToData(new RS_ERR_OUTPUT_NOT_FINISHED(3, 7));
    expect(Object.getPrototypeOf(data)).toBe(Object.prototype);
    expect(data).toEqual({
      code: 'RS_ERR_OUTPUT_NOT_FINISHED',
      message: 'request slot 3 holds no finished response of generation 7',
      statusCode: 500,
      param: null,
    });
  });

  it('map an uncoded thrown value as toRingserveError does, and keep a code no one registered', () => {
    const internal = across(new TypeError('boom'));
    expect(internal).toBeInstanceOf(RS_ERR_SERVER_INTERNAL);
    expect(internal.message).toMatch(/boom/);
    const odd = across(new RingserveError('RS_ERR_ELSEWHERE_ONLY', 'odd', 418, 'x'));
    expect(odd).toBeInstanceOf(RingserveError);
    expect(odd).toMatchObject({ code: 'RS_ERR_ELSEWHERE_ONLY', statusCode: 418, param: 'x' });
  });
});
