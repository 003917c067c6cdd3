import type { ModelCard } from '../../wire/model-card.js';

/**
 * A model's routing rows as vLLM gives them: [rows, hiddenLayers, topk] (num_hidden_layers, as
 * vLLM's capturer), of which the engine's own rows (the simulator's, the ring's) are the last
 * routingLayers layers; a model whose first layers are dense (GLM) has zero ids there. The bridge
 * checks an engine's rows against it (bridge-output.ts), the headless engine writes its rows to it
 * (headless/step-encoder.ts).
 */
export interface RoutingShape {
  /** Layers of a vLLM row (num_hidden_layers). */
  hiddenLayers: number;
  /** Layers of the engine's own rows (the last routingLayers of a vLLM row). */
  routingLayers: number;
  topk: number;
}

/** The card's routing-row shape. */
export function routingShapeOf(card: ModelCard): RoutingShape {
  return {
    hiddenLayers: card.numHiddenLayers,
    routingLayers: card.routingLayers,
    topk: card.expertsPerToken,
  };
}
