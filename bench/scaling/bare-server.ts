/**
 * The ceiling of `npm run bench:scaling`: a bare fastify route on the same machine, in the same run.
 * POST /inference/v1/generate parses the JSON body like ringserve's route does and answers a canned
 * body (a real ringserve answer of the same kind, captured earlier in the run), so it costs HTTP,
 * body parsing and the reply, and nothing of an engine, a ring or an encoder. With --workers k it
 * runs k node:cluster processes on one port, as ringserve's API servers do.
 *
 *   node dist/bench/scaling/bare-server.js --workers 2 --body-file /tmp/x.bin --content-type application/json
 *
 * Prints `bare server listening on port <p>` on stderr once every worker listens.
 */
import cluster from 'node:cluster';
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';
import { ExitCode } from '../../src/errors.js';

interface Args {
  workers: number;
  bodyFile: string;
  contentType: string;
}

function parseArgs(argv: string[]): Args {
  const get = (flag: string): string => {
    const i = argv.indexOf(flag);
    const v = i < 0 ? undefined : argv[i + 1];
    if (v === undefined) throw new Error(`bare-server: ${flag} is required`);
    return v;
  };
  return {
    workers: Number(get('--workers')),
    bodyFile: get('--body-file'),
    contentType: get('--content-type'),
  };
}

async function worker(args: Args): Promise<void> {
  const body = readFileSync(args.bodyFile);
  const app = Fastify({ logger: false, bodyLimit: 32 * 1024 * 1024, keepAliveTimeout: 75_000 });
  app.post('/inference/v1/generate', async (request, reply) => {
    const parsed = request.body as { token_ids?: unknown } | null;
    if (!Array.isArray(parsed?.token_ids)) return reply.code(400).send({ error: 'token_ids' });
    return reply.header('content-type', args.contentType).send(body);
  });
  app.get('/health', async (_request, reply) => reply.send());
  // Port 0 in a node:cluster worker is shared: the primary picks one port for all workers.
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  process.send?.({ port: typeof address === 'object' && address !== null ? address.port : 0 });
}

function primary(args: Args): void {
  process.title = 'ringserve-bench-bare';
  let listening = 0;
  for (let k = 0; k < args.workers; k++) {
    const w = cluster.fork();
    w.on('message', (m: { port: number }) => {
      if (++listening === args.workers) console.error(`bare server listening on port ${m.port}`);
    });
  }
  cluster.on('exit', (_w, code) => {
    if (code !== 0) console.error(`bare server: a worker exited with ${code}`);
  });
  const stop = (): void => {
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGTERM');
    process.exit(ExitCode.Ok);
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

const args = parseArgs(process.argv.slice(2));
if (cluster.isPrimary) primary(args);
else
  worker(args).catch((error: unknown) => {
    console.error(`bare server worker: ${(error as Error).stack ?? String(error)}`);
    process.exit(ExitCode.Failure);
  });
