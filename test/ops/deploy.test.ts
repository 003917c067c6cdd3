/**
 * The deployment files, parsed and held to a schema, since no cluster runs here: the systemd unit
 * (`systemd-analyze verify` too where installed), the Dockerfile and the Kubernetes manifests.
 * Each must state the /dev/shm size the node's region takes, as ops/shm-size.ts computes it from
 * the region layout, and size what it mounts there to fit.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { mib, shmBytes } from '../../ops/shm-size.js';
import { parseArgs } from '../../src/cli-args.js';
import { quantityBytes, type Schema, schemaErrors } from './schema.js';
import { hasTool, titleNeeding } from './tools.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
/** Every deployment gives the node its key through the environment (VLLM_API_KEY). */
const DEPLOY_ENV = { VLLM_API_KEY: 'from-the-environment' };
/** How every file words the default node's need: "<bytes> bytes (<MiB> MiB)". */
const SHM_PER_SERVER = `${shmBytes([])} bytes (${mib(shmBytes([]))} MiB) per API server`;

describe('ops/systemd/ringserve.service', () => {
  const UNIT = join(ROOT, 'ops/systemd/ringserve.service');
  const text = read('ops/systemd/ringserve.service');
  /** Section -> key -> values, in order (a key may repeat). */
  const unit = new Map<string, Map<string, string[]>>();
  let section: Map<string, string[]> | undefined;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.trim() === '') continue;
    const header = /^\[(\w+)\]$/.exec(line);
    if (header !== null) {
      section = new Map();
      unit.set(header[1]!, section);
      continue;
    }
    const eq = line.indexOf('=');
    const key = line.slice(0, eq);
    section!.set(key, [...(section!.get(key) ?? []), line.slice(eq + 1)]);
  }
  const value = (s: string, k: string) => unit.get(s)?.get(k)?.at(-1);

  it('has only keys that belong to their section', () => {
    const allowed: Record<string, string[]> = {
      Unit: [
        'Description',
        'Documentation',
        'After',
        'Wants',
        'StartLimitIntervalSec',
        'StartLimitBurst',
      ],
      Service: [
        ...['Type', 'User', 'Group', 'WorkingDirectory', 'EnvironmentFile', 'ExecStart'],
        ...['KillSignal', 'KillMode', 'TimeoutStopSec', 'Restart', 'RestartSec', 'LimitNOFILE'],
        ...[
          'TasksMax',
          'RemoveIPC',
          'NoNewPrivileges',
          'ProtectSystem',
          'ProtectHome',
          'PrivateTmp',
        ],
      ],
      Install: ['WantedBy'],
    };
    expect([...unit.keys()].sort()).toEqual(Object.keys(allowed).sort());
    for (const [name, keys] of unit) {
      expect(
        [...keys.keys()].filter((k) => !allowed[name]!.includes(k)),
        name,
      ).toEqual([]);
    }
  });

  it('restarts the node, drains on SIGTERM within the stop timeout, raises the limits', () => {
    expect(['always', 'on-failure']).toContain(value('Service', 'Restart'));
    expect(value('Service', 'KillSignal')).toBe('SIGTERM');
    expect(value('Service', 'KillMode')).toBe('mixed');
    const drain = parseArgs([], DEPLOY_ENV).drainTimeoutS;
    expect(Number.parseInt(value('Service', 'TimeoutStopSec')!, 10)).toBeGreaterThan(drain);
    expect(Number.parseInt(value('Service', 'LimitNOFILE')!, 10)).toBeGreaterThanOrEqual(65536);
    expect(value('Service', 'User')).not.toBe('root');
    expect(value('Install', 'WantedBy')).toBe('multi-user.target');
    const exec = value('Service', 'ExecStart')!.split(' ');
    expect(exec[0]).toMatch(/^\//);
    expect(exec.slice(1, 3)).toEqual(['/opt/ringserve/dist/src/cli.js', 'serve']);
    expect(() => parseArgs(exec.slice(3), DEPLOY_ENV)).not.toThrow();
  });

  it('states the /dev/shm the node needs', () => {
    expect(text.replace(/\n# /g, ' ')).toContain(SHM_PER_SERVER);
  });

  it.skipIf(!hasTool('systemd-analyze'))(
    titleNeeding('passes systemd-analyze verify without a warning', 'systemd-analyze'),
    () => {
      const run = spawnSync('systemd-analyze', ['verify', UNIT], { encoding: 'utf8' });
      expect(run.status).toBe(0);
      // verify exits 0 on unknown or misplaced keys; it only says so.
      expect(run.stderr.split('\n').filter((l) => l.includes(UNIT))).toEqual([]);
    },
  );
});

interface Instruction {
  op: string;
  args: string;
}

/** Dockerfile instructions, continuation lines joined, comments dropped. */
function dockerInstructions(text: string): Instruction[] {
  const logical = text
    .split('\n')
    .filter((l) => !l.trimStart().startsWith('#'))
    .join('\n')
    .replace(/\\\n/g, ' ');
  return logical
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0)
    .map((l) => {
      const space = l.indexOf(' ');
      return { op: l.slice(0, space).toUpperCase(), args: l.slice(space + 1).trim() };
    });
}

describe('ops/docker/Dockerfile', () => {
  const text = read('ops/docker/Dockerfile');
  const all = dockerInstructions(text);
  const stages: Instruction[][] = [];
  for (const ins of all) {
    if (ins.op === 'FROM') stages.push([]);
    stages.at(-1)?.push(ins);
  }
  const stageName = (s: Instruction[]) => /\bAS\s+(\S+)$/i.exec(s[0]!.args)?.[1];
  const build = stages[0]!;
  const runtime = stages.at(-1)!;

  it('builds in one stage with `npm ci` from the lock file and runs in another', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    for (const stage of stages) expect(stageName(stage)).toBeDefined();
    const ci = build.findIndex((i) => i.op === 'RUN' && /\bnpm ci\b/.test(i.args));
    expect(ci).toBeGreaterThan(0);
    expect(build.some((i) => i.op === 'RUN' && /\bnpm install\b/.test(i.args))).toBe(false);
    // The lock reaches the stage before `npm ci` (COPY . . brings it unless ignored).
    const copies = build.slice(0, ci).filter((i) => i.op === 'COPY');
    expect(copies.some((c) => /package-lock\.json|^\.\s+\.$/.test(c.args))).toBe(true);
    const ignored = read('ops/docker/Dockerfile.dockerignore')
      .split('\n')
      .filter((l) => l && !l.startsWith('#'));
    expect(ignored).toEqual(expect.arrayContaining(['node_modules', 'dist', 'build']));
    expect(ignored.filter((p) => /package|src|scripts|binding/.test(p))).toEqual([]);
    const fromBuild = runtime.filter(
      (i) => i.op === 'COPY' && i.args.includes(`--from=${stageName(build)}`),
    );
    expect(fromBuild.map((c) => c.args.split(' ').at(-2))).toEqual(
      expect.arrayContaining(['/app/node_modules', '/app/dist', '/app/build/Release']),
    );
    expect(runtime.some((i) => i.op === 'RUN' && /apt-get|npm/.test(i.args))).toBe(false);
  });

  it('runs as a non-root user, serves port 8000, checks /liveness', () => {
    const user = runtime.filter((i) => i.op === 'USER').at(-1)?.args;
    expect(user).toBeDefined();
    expect(['root', '0']).not.toContain(user!.split(':')[0]);
    expect(runtime.find((i) => i.op === 'EXPOSE')?.args).toBe('8000');
    expect(runtime.find((i) => i.op === 'HEALTHCHECK')?.args).toContain('/liveness');
    const entry = JSON.parse(runtime.find((i) => i.op === 'ENTRYPOINT')!.args) as string[];
    expect(entry).toEqual(['node', 'dist/src/cli.js', 'serve']);
    const cmd = JSON.parse(runtime.find((i) => i.op === 'CMD')!.args) as string[];
    expect(() => parseArgs(cmd, DEPLOY_ENV)).not.toThrow();
  });

  it("uses a Node the package's engines allow, the same in both stages", () => {
    const arg = all.find((i) => i.op === 'ARG')!.args;
    const image = /^NODE_IMAGE=node:(\d+)\.(\d+)/.exec(arg);
    expect(image).not.toBeNull();
    const [major, minor] = [Number(image![1]), Number(image![2])];
    expect(major > 20 || (major === 20 && minor >= 19)).toBe(true);
    for (const stage of stages) expect(stage[0]!.args).toMatch(/^\$\{NODE_IMAGE\} AS /);
  });

  it('states the /dev/shm the node needs, and that Docker gives 64 MiB', () => {
    const prose = text.replace(/\n# /g, ' ');
    expect(prose).toContain(SHM_PER_SERVER);
    expect(shmBytes([])).toBeLessThanOrEqual(64 * 2 ** 20);
    expect(prose).toMatch(/default \/dev\/shm is 64 MiB/);
  });
});

const PROBE: Schema = {
  httpGet: { path: 'string', port: 'any' },
  periodSeconds: 'integer',
  timeoutSeconds: 'integer',
  failureThreshold: 'integer',
  '?successThreshold': 'integer',
  '?initialDelaySeconds': 'integer',
};
const METADATA: Schema = { name: 'string', labels: 'any' };
const DEPLOYMENT: Schema = {
  apiVersion: 'string',
  kind: 'string',
  metadata: METADATA,
  spec: {
    replicas: 'integer',
    selector: { matchLabels: 'any' },
    template: {
      metadata: { labels: 'any' },
      spec: {
        terminationGracePeriodSeconds: 'integer',
        containers: [
          {
            name: 'string',
            image: 'string',
            args: ['string'],
            ports: [{ name: 'string', containerPort: 'integer' }],
            readinessProbe: PROBE,
            livenessProbe: PROBE,
            resources: { requests: { cpu: 'string', memory: 'string' }, '?limits': 'any' },
            volumeMounts: [{ name: 'string', mountPath: 'string' }],
          },
        ],
        volumes: [{ name: 'string', '?emptyDir': { '?medium': 'string', '?sizeLimit': 'string' } }],
      },
    },
  },
};
const SERVICE: Schema = {
  apiVersion: 'string',
  kind: 'string',
  metadata: METADATA,
  spec: { selector: 'any', ports: [{ name: 'string', port: 'integer', targetPort: 'any' }] },
};
const POD_MONITOR: Schema = {
  apiVersion: 'string',
  kind: 'string',
  metadata: METADATA,
  spec: {
    selector: { matchLabels: 'any' },
    podMetricsEndpoints: [{ port: 'string', path: 'string', interval: 'string' }],
  },
};

// biome-ignore lint/suspicious/noExplicitAny: parsed manifests, checked against the schemas above
type Manifest = any;

describe('ops/k8s', () => {
  const docs = ['deployment.yaml', 'service.yaml', 'podmonitor.yaml'].flatMap((file) =>
    parseAllDocuments(read(`ops/k8s/${file}`)).map((d) => {
      expect(d.errors, file).toEqual([]);
      return d.toJS() as Manifest;
    }),
  );
  const byKind = (kind: string) => docs.find((d) => d.kind === kind) as Manifest;
  const deployment = byKind('Deployment');
  const pod = deployment.spec.template;
  const container = pod.spec.containers[0];

  it('has a Deployment, a Service and a PodMonitor, each matching its schema', () => {
    expect(docs.map((d) => `${d.apiVersion} ${d.kind}`).sort()).toEqual([
      'apps/v1 Deployment',
      'monitoring.coreos.com/v1 PodMonitor',
      'v1 Service',
    ]);
    expect(schemaErrors(deployment, DEPLOYMENT)).toEqual([]);
    expect(schemaErrors(byKind('Service'), SERVICE)).toEqual([]);
    expect(schemaErrors(byKind('PodMonitor'), POD_MONITOR)).toEqual([]);
  });

  it('is ready on /health, alive on /liveness, on the port it declares', () => {
    expect(container.readinessProbe.httpGet.path).toBe('/health');
    expect(container.livenessProbe.httpGet.path).toBe('/liveness');
    const ports = container.ports.map((p: Manifest) => p.name);
    expect(ports).toContain(container.readinessProbe.httpGet.port);
    expect(ports).toContain(container.livenessProbe.httpGet.port);
    const config = parseArgs(container.args, DEPLOY_ENV);
    expect(container.ports[0].containerPort).toBe(config.port);
    expect(pod.spec.terminationGracePeriodSeconds).toBeGreaterThan(config.drainTimeoutS);
    expect(quantityBytes(container.resources.requests.memory)).toBeGreaterThan(0);
  });

  it('mounts a memory-backed emptyDir at /dev/shm that holds the region its args make', () => {
    const mount = container.volumeMounts.find((m: Manifest) => m.mountPath === '/dev/shm');
    const volume = pod.spec.volumes.find((v: Manifest) => v.name === mount?.name);
    expect(volume?.emptyDir?.medium).toBe('Memory');
    expect(quantityBytes(volume.emptyDir.sizeLimit)).toBeGreaterThanOrEqual(
      shmBytes(container.args),
    );
    expect(read('ops/k8s/deployment.yaml').replace(/\n# /g, ' ')).toContain(
      SHM_PER_SERVER.replace(' per API server', ''),
    );
  });

  it('selects the pods from the Service and the PodMonitor, on the declared port', () => {
    const labels = pod.metadata.labels;
    const matches = (selector: Record<string, string>) =>
      Object.entries(selector).every(([k, v]) => labels[k] === v);
    expect(matches(deployment.spec.selector.matchLabels)).toBe(true);
    const service = byKind('Service');
    expect(matches(service.spec.selector)).toBe(true);
    const ports = container.ports.map((p: Manifest) => p.name);
    expect(ports).toContain(service.spec.ports[0].targetPort);
    const monitor = byKind('PodMonitor');
    expect(matches(monitor.spec.selector.matchLabels)).toBe(true);
    expect(ports).toContain(monitor.spec.podMetricsEndpoints[0].port);
    expect(monitor.spec.podMetricsEndpoints[0].path).toBe('/metrics');
  });
});

it('ops/shm-size.js prints what the files state', () => {
  const out = execFileSync(process.execPath, [join(ROOT, 'dist/ops/shm-size.js')], {
    encoding: 'utf8',
  });
  expect(out).toBe(`${shmBytes([])} bytes (${mib(shmBytes([]))} MiB) of /dev/shm\n`);
});
