/**
 * The app's metrics across the workers (`attach(server, {metricsRegistry})`),
 * kept the way prom-client's `AggregatorRegistry` cannot: there one slow worker
 * fails the whole scrape (prometheus/client_js#181) and a worker that exits
 * takes its counters with it (prometheus/client_js#385).
 *
 * - each worker's last values are kept, so a worker that does not answer a
 *   scrape in time still counts with what it said last;
 * - when a worker is gone, its counters and histograms move to `departed`,
 *   which a scrape adds like one more worker: the cluster's sums never go
 *   down. A worker leaving on purpose sends its final values first; a crash
 *   loses what it counted since the last scrape.
 *
 * Gauges and summaries of a gone worker are dropped (a summary's quantiles do
 * not add up).
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

	/** The gone workers' sums come last, so a live worker's help and type lead. */
	snapshot(): Metric[][] {
		const departed: Metric[] = [...this.departed.values()].map(({metric, values}) => ({...metric, values: [...values.values()].map(value => ({...value}))}));
		return [...this.latest.values(), ...(departed.length > 0 ? [departed] : [])];
	}
}
