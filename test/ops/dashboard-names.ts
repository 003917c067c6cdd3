/**
 * The metric names ops/grafana/ringserve.json queries, read out of its PromQL: every name with one
 * of the prefixes ringserve (vllm:, ringserve_, nodejs_, process_) or HAProxy (haproxy_) exports.
 * Histograms are queried through their samples (`_bucket`, `_sum`, `_count`), which is how the
 * names appear on /metrics too.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const DASHBOARD_PATH = fileURLToPath(
  new URL('../../ops/grafana/ringserve.json', import.meta.url),
);

const METRIC = /\b(?:vllm:[a-z0-9_:]+|(?:ringserve|nodejs|process|haproxy)_[a-z0-9_]+)/g;

export interface DashboardTarget {
  panel: string;
  expr: string;
}

interface Panel {
  title?: string;
  targets?: { expr?: string }[];
  panels?: Panel[];
}

export function dashboardTargets(): DashboardTarget[] {
  const dashboard = JSON.parse(readFileSync(DASHBOARD_PATH, 'utf8')) as { panels: Panel[] };
  const out: DashboardTarget[] = [];
  const walk = (panels: Panel[]): void => {
    for (const panel of panels) {
      for (const target of panel.targets ?? []) {
        out.push({ panel: panel.title ?? '', expr: target.expr ?? '' });
      }
      walk(panel.panels ?? []);
    }
  };
  walk(dashboard.panels);
  return out;
}

/** The metric names in a PromQL expression (label values, in quotes, are not names). */
export function metricNames(expr: string): string[] {
  return [...new Set(expr.replace(/"[^"]*"/g, '""').match(METRIC) ?? [])];
}

/** Every name the dashboard queries, split into ringserve's and HAProxy's. */
export function dashboardMetricNames(): { ringserve: string[]; haproxy: string[] } {
  const all = new Set(dashboardTargets().flatMap((t) => metricNames(t.expr)));
  const names = [...all].sort();
  return {
    ringserve: names.filter((n) => !n.startsWith('haproxy_')),
    haproxy: names.filter((n) => n.startsWith('haproxy_')),
  };
}

/** The sample names in a Prometheus text exposition. */
export function exposedNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const line of text.split('\n')) {
    if (line.length === 0 || line.startsWith('#')) continue;
    names.add(line.split(/[{ ]/, 1)[0]!);
  }
  return names;
}
