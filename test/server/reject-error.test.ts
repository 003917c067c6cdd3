/**
 * What an API server answers a request the engine refused with (server/cross-thread/reject-error.ts): a 500
 * naming the reason for most, a 400 naming max_tokens for a request over the engine's
 * max_model_len, a 503 for one whose engine died under it.
 */
import { describe, expect, it } from 'vitest';
import { rejectError } from '../../src/server/cross-thread/reject-error.js';
import { RejectReason } from '../../src/wire/reject.js';

describe('rejectError', () => {
  it('maps reject reasons to the contract statuses', () => {
    expect(rejectError(RejectReason.KvCacheTooSmall, 'r')).toMatchObject({
      code: 'RS_ERR_ENGINE_REQUEST_FAILED',
      statusCode: 500,
    });
    expect(rejectError(RejectReason.PromptTooLong, 'r')).toMatchObject({
      code: 'RS_ERR_REQ_INVALID_FIELD',
      statusCode: 400,
      param: 'sampling_params.max_tokens',
    });
    expect(rejectError(RejectReason.EngineDead, 'r')).toMatchObject({
      code: 'RS_ERR_ENGINE_DEAD',
      statusCode: 503,
    });
    expect(rejectError(RejectReason.EngineFailed, 'r').message).toMatch(/finish reason ERROR/);
  });
});
