/**
 * The coded error an API server answers a request the engine refused with (FinishReason.Error and
 * a RejectReason): most are request-scoped engine failures (500), but a request over the engine's
 * max_model_len is the client's (400, naming the field, as vLLM's frontend answers it), and one
 * whose engine died under it is a 503, as every request refused for a dead engine is; so is one
 * whose engine sends routing rows the model's card does not describe (a deployment error); one
 * whose LoRA adapter was unloaded before it ran is a 404, as an unknown `model` is.
 */
import {
  type RingserveError,
  RS_ERR_ENGINE_DEAD,
  RS_ERR_ENGINE_REQUEST_FAILED,
  RS_ERR_ENGINE_ROUTING_SHAPE,
  RS_ERR_MODEL_NOT_FOUND,
  RS_ERR_REQ_INVALID_FIELD,
} from '../../errors.js';
import { RejectReason, rejectReasonMessage } from '../../wire/reject.js';

export function rejectError(reason: number, requestId: string): RingserveError {
  switch (reason) {
    case RejectReason.PromptTooLong:
      return new RS_ERR_REQ_INVALID_FIELD(
        'sampling_params.max_tokens',
        `${rejectReasonMessage(reason)} of the engine`,
      );
    case RejectReason.EngineDead:
      return new RS_ERR_ENGINE_DEAD(rejectReasonMessage(reason));
    case RejectReason.LoraNotLoaded:
      // The name resolved when the request arrived; the adapter went before it ran: vLLM's 404.
      return new RS_ERR_MODEL_NOT_FOUND(`LoRA adapter of request ${requestId}`);
    case RejectReason.RoutingShape:
      return new RS_ERR_ENGINE_ROUTING_SHAPE(requestId, rejectReasonMessage(reason));
    default:
      return new RS_ERR_ENGINE_REQUEST_FAILED(requestId, rejectReasonMessage(reason));
  }
}
