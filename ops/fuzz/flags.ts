/** The cluster the route fuzz runs against: small, fast answers, two API servers on one port. */
export const FUZZ_CLUSTER_FLAGS: readonly string[] = [
  '--model',
  'tiny',
  '--max-speed',
  '--max-model-len',
  '512',
  '--api-server-count',
  '2',
];
