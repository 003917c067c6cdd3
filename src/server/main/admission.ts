/**
 * Whether this API server takes a request now, past parsing (every 400 is raised there): the
 * checks in the order a client should meet them, each a coded error the route answers with.
 */
import { randomUUID } from 'node:crypto';
import {
  RS_ERR_ENGINE_DEAD,
  RS_ERR_ENGINE_UNAVAILABLE,
  RS_ERR_REQ_DUPLICATE_ID,
  RS_ERR_SERVER_DRAINING,
  RS_ERR_SERVER_QUEUE_FULL,
} from '../../errors.js';
import type { EnginePort } from './engine-port.js';
import type { RequestTable } from './request-table.js';

export interface AdmissionState {
  draining: boolean;
  engine: EnginePort;
  table: RequestTable;
}

/**
 * Throws why `n` sequences of request `requestId` cannot start: the server is draining (503), the
 * engine is down or cannot take requests (503, with the engine's reason when it gave one), the id
 * is in flight here (409), or fewer than n slots are free (429).
 */
export function admit(state: AdmissionState, requestId: string, n: number): void {
  if (state.draining) throw new RS_ERR_SERVER_DRAINING();
  if (!state.engine.alive()) {
    const reason = state.engine.note?.().reason ?? null;
    if (reason !== null) throw new RS_ERR_ENGINE_UNAVAILABLE(reason);
    throw new RS_ERR_ENGINE_DEAD('no heartbeat from the engine core');
  }
  if (state.table.byId(requestId) !== undefined) throw new RS_ERR_REQ_DUPLICATE_ID(requestId);
  const slots = state.table.slots;
  if (slots.available < n) throw new RS_ERR_SERVER_QUEUE_FULL(slots.capacity);
}

/** The request's id: the `X-Request-Id` header wins over the body's `request_id`, else a fresh one. */
export function requestIdOf(headerId: string | undefined, bodyId: string | null): string {
  return headerId ?? bodyId ?? randomUUID().replaceAll('-', '');
}
