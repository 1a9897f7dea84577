/**
 * The app's metrics as they cross the IPC channel: the shape of prom-client's
 * `getMetricsAsJSON()` (what `AggregatorRegistry.aggregate` takes), and its
 * bounds.
 */
/** One metric as prom-client's `getMetricsAsJSON()` gives it (the fields the aggregation reads). */
export interface MetricJson {
	readonly name: string;
	readonly help: string;
	readonly type: MetricType;
	readonly aggregator: Aggregator;
	/** `value` is null where the app's was NaN or ±Infinity: JSON has no such numbers. */
	readonly values: ReadonlyArray<{readonly value: number | null; readonly labels: Readonly<Record<string, string | number>>; readonly metricName?: string}>;
}

export const METRIC_TYPES = ['counter', 'gauge', 'histogram', 'summary'] as const;
export type MetricType = (typeof METRIC_TYPES)[number];
/** prom-client's aggregators (lib/metricAggregators.js). */
export const AGGREGATORS = ['sum', 'first', 'min', 'max', 'average', 'omit'] as const;
export type Aggregator = (typeof AGGREGATORS)[number];


/** Bounds on a worker's metrics: an app registry gone wild must not cost the primary its memory. */
export const MAX_METRICS = 2000;
export const MAX_METRIC_VALUES = 50_000;
const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/** A `getMetricsAsJSON()` result within bounds: names, types, aggregators and finite (or ±Inf/NaN) numbers. */
export function isMetricsJson(value: unknown): boolean {
	if (!Array.isArray(value) || value.length > MAX_METRICS) {
		return false;
	}

	let values = 0;
	for (const metric of value as unknown[]) {
		if (typeof metric !== 'object' || metric === null) {
			return false;
		}

		const {name, help, type, aggregator, values: list} = metric as Record<string, unknown>;
		if (typeof name !== 'string' || !NAME.test(name) || name.length > 200 || typeof help !== 'string' || help.length > 4096
			|| !(METRIC_TYPES as readonly unknown[]).includes(type) || !(AGGREGATORS as readonly unknown[]).includes(aggregator ?? 'sum') || !Array.isArray(list)) {
			return false;
		}

		values += list.length;
		if (values > MAX_METRIC_VALUES) {
			return false;
		}

		for (const entry of list as unknown[]) {
			if (typeof entry !== 'object' || entry === null) {
				return false;
			}

			const {value: number, labels, metricName} = entry as Record<string, unknown>;
			if ((typeof number !== 'number' && number !== null) || (labels !== undefined && (typeof labels !== 'object' || labels === null)) || (metricName !== undefined && (typeof metricName !== 'string' || !NAME.test(metricName)))) {
				return false;
			}
		}
	}

	return true;
}

