/**
 * The `x-ringserve-api-server` response header (docs/contract.md): the index of the API server that
 * answered, on /health and /metrics. Any API server gives the same /metrics figures; a probe through
 * the shared port reads it to tell which server answered (the soak's recovery check, the tests).
 */
export const API_SERVER_HEADER = 'x-ringserve-api-server';
