/**
 * The app's metrics across the workers (`attach(server, {metricsRegistry})`),
 * kept the way prom-client's `AggregatorRegistry` cannot (RESEARCH-2 section 3a):
 *
 * - each worker's last values are kept, so a worker that does not answer a
 *   scrape in time still counts with what it said last (the scrape is partial,
 *   not failed), and one that crashed still counts with its last scrape;
 * - when a worker is gone, its counters and histograms (what only goes up) move
 *   to `departed`, which a scrape adds like one more worker: the cluster's sums
 *   never go down when a worker exits, crashes, is recycled or reloaded. A worker
 *   leaving on purpose sends its final values before it says `drained`, so
 *   nothing it counted is lost; a crash loses what it counted since the last scrape.
 *
 * Gauges and summaries of a gone worker are dropped (a summary's quantiles do
 * not add up). The aggregation itself is prom-client's (`aggregate`), so each
 * metric's `aggregator` means what it means there.
 */
import type {MetricJson} from '../metrics-json.js';

/** A metric's value as prom-client's JSON has it; null (NaN/±Inf through JSON) read as NaN. */
type Value = {value: number; labels: Record<string, string | number>; metricName?: string};
export type Metric = Omit<MetricJson, 'values'> & {values: Value[]};

/** What only goes up, and so survives its worker. */
const keepsAfterExit = (metric: MetricJson): boolean =>
	(metric.type === 'counter' || metric.type === 'histogram') && (metric.aggregator ?? 'sum') === 'sum';

function valueKey(value: {readonly labels?: Readonly<Record<string, string | number>>; readonly metricName?: string}): string {
	const labels = Object.entries(value.labels ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
	return `${value.metricName ?? ''}\u0000${JSON.stringify(labels)}`;
}

/** prom-client's JSON as the aggregation wants it: null back to NaN, labels always an object, the aggregator always set. */
export function normalise(metrics: readonly MetricJson[]): Metric[] {
	return metrics.map(metric => ({
		name: metric.name,
		help: metric.help,
		type: metric.type,
		aggregator: metric.aggregator ?? 'sum',
		values: metric.values.map(value => ({
			value: value.value ?? Number.NaN,
			labels: {...value.labels},
			...(value.metricName === undefined ? {} : {metricName: value.metricName}),
		})),
	}));
}

export class AppMetrics {
	/** Each live worker's last values, by worker id. */
	private readonly latest = new Map<number, Metric[]>();
	/** The counters and histograms of workers gone, summed, by metric name then value key. */
	private readonly departed = new Map<string, {metric: Omit<Metric, 'values'>; values: Map<string, Value>}>();

	/** A worker's values, asked for or final: they replace its previous ones. */
	update(workerId: number, metrics: readonly MetricJson[]): void {
		this.latest.set(workerId, normalise(metrics));
	}

	has(workerId: number): boolean {
		return this.latest.has(workerId);
	}

	/** The worker is gone: what it counted stays in the sums. */
	leave(workerId: number): void {
		const last = this.latest.get(workerId);
		this.latest.delete(workerId);
		for (const metric of last ?? []) {
			if (!keepsAfterExit(metric)) {
				continue;
			}

			let kept = this.departed.get(metric.name);
			if (kept === undefined) {
				kept = {metric: {name: metric.name, help: metric.help, type: metric.type, aggregator: metric.aggregator}, values: new Map()};
				this.departed.set(metric.name, kept);
			} else if (kept.metric.type !== metric.type) {
				// The app changed the metric's type between versions (a reload): the old sums cannot be added to it.
				continue;
			}

			for (const value of metric.values) {
				if (!Number.isFinite(value.value)) {
					continue;
				}

				const key = valueKey(value);
				const sum = kept.values.get(key);
				if (sum) {
					sum.value += value.value;
				} else {
					kept.values.set(key, {...value, labels: {...value.labels}});
				}
			}
		}
	}

	/**
	 * What a scrape aggregates: every live worker's last values, then the gone
	 * workers' sums as one more entry (last, so a live worker's help and type lead).
	 */
	snapshot(): Metric[][] {
		const departed: Metric[] = [...this.departed.values()].map(({metric, values}) => ({...metric, values: [...values.values()].map(value => ({...value}))}));
		return [...this.latest.values(), ...(departed.length > 0 ? [departed] : [])];
	}
}
