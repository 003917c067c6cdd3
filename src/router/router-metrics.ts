/**
 * The router's own /metrics: requests by outcome, the decode answers that recomputed the prompt
 * (a failed or expired KV load: their rows start before P-1), per role its instances (all, and
 * those taking requests: healthy and not draining), and per instance its outstanding requests,
 * health and whether it drains. Prometheus text written with obs/'s helpers, as the server's families are.
 */
import type { GenerateResult } from '../client/decode.js';
import { familyHeader, labelText, sampleValue } from '../obs/text-format.js';
import type { Upstream, UpstreamPool } from './upstreams.js';

export class RouterMetrics {
  readonly #byCode = new Map<number, number>();
  recomputed = 0;
  imported = 0;

  noteAnswer(status: number): void {
    this.#byCode.set(status, (this.#byCode.get(status) ?? 0) + 1);
  }

  /** A decode answer whose rows start before the prompt's last token recomputed the prompt. */
  noteDecode(prefill: GenerateResult, decode: GenerateResult): void {
    const p = prefill.choices[0]?.routedExperts;
    const d = decode.choices[0]?.routedExperts;
    if (p === undefined || p === null || d === undefined || d === null) return;
    if (d.start < p.start + p.shape[0] - 1) this.recomputed++;
    else this.imported++;
  }

  text(pools: readonly UpstreamPool[]): string {
    let out = familyHeader(
      'ringserve_router_requests_total',
      'Requests answered, by HTTP status.',
      'counter',
    );
    for (const [code, n] of [...this.#byCode].sort((a, b) => a[0] - b[0])) {
      out += `ringserve_router_requests_total{${labelText([['code', String(code)]])}} ${n}\n`;
    }
    out += familyHeader(
      'ringserve_router_kv_imports_total',
      'Decode answers, by whether the prompt KV was imported or recomputed.',
      'counter',
    );
    out += `ringserve_router_kv_imports_total{outcome="imported"} ${this.imported}\n`;
    out += `ringserve_router_kv_imports_total{outcome="recomputed"} ${this.recomputed}\n`;
    out += perRole(
      pools,
      'ringserve_router_instances',
      'Instances per role, draining ones included.',
      (p) => p.instances.length,
    );
    out += perRole(
      pools,
      'ringserve_router_instances_serving',
      'Instances per role that take new requests (healthy, not draining).',
      (p) => p.instances.filter((u) => u.healthy && !u.draining).length,
    );
    out += perInstance(
      pools,
      'ringserve_router_upstream_outstanding',
      'Requests in flight per instance.',
      (u) => u.outstanding,
    );
    out += perInstance(
      pools,
      'ringserve_router_upstream_healthy',
      '1 while the instance passes its /health check.',
      (u) => (u.healthy ? 1 : 0),
    );
    out += perInstance(
      pools,
      'ringserve_router_upstream_draining',
      '1 while the instance is being removed (no new requests).',
      (u) => (u.draining ? 1 : 0),
    );
    return out;
  }
}

/** A gauge family with one sample per role. */
function perRole(
  pools: readonly UpstreamPool[],
  name: string,
  help: string,
  value: (pool: UpstreamPool) => number,
): string {
  let out = familyHeader(name, help, 'gauge');
  for (const pool of pools) out += `${name}{${labelText([['role', pool.role]])}} ${value(pool)}\n`;
  return out;
}

/** A gauge family with one sample per instance, labelled by role and URL. */
function perInstance(
  pools: readonly UpstreamPool[],
  name: string,
  help: string,
  value: (u: Upstream) => number,
): string {
  let out = familyHeader(name, help, 'gauge');
  for (const pool of pools) {
    for (const u of pool.instances) {
      const labels = labelText([
        ['role', pool.role],
        ['url', u.url],
      ]);
      out += `${name}{${labels}} ${sampleValue(value(u))}\n`;
    }
  }
  return out;
}
