/**
 * The balancer's and the monitoring's configuration files, read against what they promise:
 * ops/lb/haproxy.cfg (checks, balancing, stickiness, exporter; `haproxy -c` where installed),
 * ops/prometheus/prometheus.yml (both jobs, the same nodes as the balancer; `promtool check config`
 * where installed) and ops/grafana/ringserve.json (a dashboard Grafana loads: every panel placed and
 * every query naming a metric). That each queried name exists is test/ops/dashboard.test.ts's.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { DASHBOARD_PATH, dashboardTargets, metricNames } from './dashboard-names.js';
import { hasTool, titleNeeding } from './tools.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const HAPROXY_CFG = join(ROOT, 'ops/lb/haproxy.cfg');
const PROMETHEUS_YML = join(ROOT, 'ops/prometheus/prometheus.yml');

/** haproxy.cfg as sections: "backend ringserve_nodes" -> its directive lines, comments dropped. */
function haproxySections(text: string): Map<string, string[]> {
  const sections = new Map<string, string[]>();
  let current: string[] | null = null;
  for (const raw of text.split('\n')) {
    const line = raw.replace(/#.*$/, '').trim();
    if (line.length === 0) continue;
    if (!/^\s/.test(raw)) {
      current = [];
      sections.set(line, current);
    } else current?.push(line.replace(/\s+/g, ' '));
  }
  return sections;
}

describe('ops/lb/haproxy.cfg', () => {
  const sections = haproxySections(readFileSync(HAPROXY_CFG, 'utf8'));
  const backend = sections.get('backend ringserve_nodes') ?? [];
  const defaults = sections.get('defaults') ?? [];

  it('checks /health every second, 5 s timeout, down after 3 failures, up after 2 passes', () => {
    expect(backend).toContain('option httpchk');
    expect(backend).toContain(
      'http-check send meth GET uri /health ver HTTP/1.1 hdr host ringserve',
    );
    expect(backend).toContain('http-check expect status 200');
    const server = backend.find((l) => l.startsWith('default-server'))?.split(' ') ?? [];
    expect(server).toContain('check');
    for (const [key, value] of [
      ['inter', '1s'],
      ['fastinter', '1s'],
      ['fall', '3'],
      ['rise', '2'],
    ]) {
      expect(server[server.indexOf(key!) + 1]).toBe(value);
    }
    expect(defaults).toContain('timeout check 5s');
    // A 503 (engine down, node draining) fails the check like a dead node does: nothing drops it.
    expect(backend.some((l) => l.includes('on-marked-down'))).toBe(false);
  });

  it('balances on outstanding requests and sticks sessions on X-Session-ID', () => {
    expect(backend).toContain('balance leastconn');
    expect(backend.some((l) => l.startsWith('stick-table type string'))).toBe(true);
    expect(backend).toContain('stick on req.hdr(x-session-id)');
    expect(backend).toContain('option redispatch');
    // Generation is not idempotent: only what no node answered is retried (ringserve's 503s say
    // "retry elsewhere"); a request cut by a dying node is not.
    expect(backend.filter((l) => l.startsWith('retry-on'))).toEqual(['retry-on conn-failure 503']);
    const servers = backend.filter((l) => l.startsWith('server '));
    expect(servers.length).toBeGreaterThanOrEqual(2);
  });

  it("serves HAProxy's Prometheus exporter on a frontend of its own", () => {
    const prometheus = sections.get('frontend prometheus') ?? [];
    expect(prometheus).toContain(
      'http-request use-service prometheus-exporter if { path /metrics }',
    );
    expect(prometheus.some((l) => l.startsWith('bind '))).toBe(true);
  });

  it.skipIf(!hasTool('haproxy'))(titleNeeding('passes haproxy -c', 'haproxy'), () => {
    const dir = mkdtempSync(join(tmpdir(), 'ringserve-haproxy-'));
    try {
      const out = execFileSync('haproxy', ['-c', '-f', HAPROXY_CFG], {
        env: { ...process.env, RS_STATS_SOCKET: join(dir, 'admin.sock') },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      expect(out).toMatch(/Configuration file is valid/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

interface ScrapeConfig {
  job_name: string;
  metrics_path?: string;
  static_configs: { targets: string[] }[];
}

describe('ops/prometheus/prometheus.yml', () => {
  const config = parse(readFileSync(PROMETHEUS_YML, 'utf8')) as {
    global: Record<string, unknown>;
    scrape_configs: ScrapeConfig[];
  };
  const job = (name: string) => config.scrape_configs.find((j) => j.job_name === name);
  const targets = (name: string) => job(name)?.static_configs.flatMap((s) => s.targets) ?? [];

  it('scrapes every node the balancer sends to, and the balancer', () => {
    expect(typeof config.global.scrape_interval).toBe('string');
    const haproxyServers = haproxySections(readFileSync(HAPROXY_CFG, 'utf8'))
      .get('backend ringserve_nodes')!
      .filter((l) => l.startsWith('server '))
      .map((l) => l.split(' ')[2]);
    expect(targets('ringserve').sort()).toEqual(haproxyServers.sort());
    expect(job('ringserve')?.metrics_path ?? '/metrics').toBe('/metrics');
    expect(targets('haproxy').length).toBe(1);
    expect(targets('haproxy')[0]).toMatch(/:8405$/);
    for (const t of [...targets('ringserve'), ...targets('haproxy')]) {
      expect(t).toMatch(/^[\w.-]+:\d+$/);
    }
  });

  it.skipIf(!hasTool('promtool'))(titleNeeding('passes promtool check config', 'promtool'), () => {
    const out = execFileSync('promtool', ['check', 'config', PROMETHEUS_YML], { encoding: 'utf8' });
    expect(out).toMatch(/SUCCESS/);
  });
});

describe('ops/grafana/ringserve.json', () => {
  interface Panel {
    id: number;
    type: string;
    title: string;
    gridPos: { x: number; y: number; w: number; h: number };
    datasource?: { type: string; uid: string };
    targets?: { refId: string; expr: string }[];
  }
  const dashboard = JSON.parse(readFileSync(DASHBOARD_PATH, 'utf8')) as {
    uid: string;
    title: string;
    schemaVersion: number;
    templating: { list: { name: string; type: string }[] };
    panels: Panel[];
  };

  it('is a dashboard Grafana imports: unique panel ids, every panel placed on the 24-column grid', () => {
    expect(dashboard.uid).toMatch(/^[\w-]{1,40}$/);
    expect(dashboard.title.length).toBeGreaterThan(0);
    expect(Number.isInteger(dashboard.schemaVersion)).toBe(true);
    expect(dashboard.templating.list.find((v) => v.name === 'datasource')?.type).toBe('datasource');
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const p of dashboard.panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      expect(p.gridPos.w * p.gridPos.h, p.title).toBeGreaterThan(0);
      if (p.type === 'row') continue;
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable, the chosen source
      expect(p.datasource?.uid, p.title).toBe('${datasource}');
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
    }
  });

  it("queries vLLM's names and ringserve's own (event loop, GC, ring occupancy, restarts)", () => {
    const targets = dashboardTargets();
    for (const t of targets) expect(metricNames(t.expr), t.panel).not.toEqual([]);
    const names = new Set(targets.flatMap((t) => metricNames(t.expr)));
    for (const name of [
      'vllm:num_requests_running',
      'vllm:generation_tokens_total',
      'vllm:time_to_first_token_seconds_bucket',
      'nodejs_eventloop_lag_p99_seconds',
      'nodejs_gc_duration_seconds_sum',
      'ringserve_output_ring_used_bytes',
      'ringserve_restarts_total',
      'ringserve_restart_backoff_seconds',
      'haproxy_server_status',
    ]) {
      expect(names.has(name), name).toBe(true);
    }
  });
});
