/**
 * The app's side of `/metrics`: the primary asks every worker for the registry's
 * `getMetricsAsJSON()` on each scrape and aggregates them as prom-client's
 * `AggregatorRegistry.aggregate` does; a worker leaving on purpose sends its final
 * values first, so the app's counters never go down in the cluster's sum. No
 * prom-client here: the registry is the app's own copy, and the helper stays light.
 */
import {withTimeout} from '../clock.js';
import type {MetricsRequestMessage, ToPrimary} from '../protocol.js';

interface MetricsChannel {
	metrics?: (() => Promise<unknown>) | undefined;
	send(message: ToPrimary, callback?: () => void): void;
}

/** Any prom-client `Registry` (the app's copy, whichever 15.x): the one method we call. */
export interface MetricsRegistry {
	// eslint-disable-next-line @typescript-eslint/no-redundant-type-constituents -- says the answer may come as a promise or not
	getMetricsAsJSON(): Promise<unknown> | unknown;
}

export const METRICS_COLLECT_MS = 5000;
const FINAL_METRICS_MS = 1000;

export function isMetricsRegistry(value: unknown): value is MetricsRegistry {
	return typeof value === 'object' && value !== null && typeof (value as MetricsRegistry).getMetricsAsJSON === 'function';
}

/** The last attach() that gives one wins. */
export function shareMetrics(channel: MetricsChannel, registry: MetricsRegistry): void {
	channel.metrics = async () => registry.getMetricsAsJSON();
}

/** `[]` if the app has none, or its registry throws or hangs. */
export async function collectMetrics(channel: MetricsChannel, timeoutMs = METRICS_COLLECT_MS): Promise<unknown> {
	const source = channel.metrics;
	if (!source) {
		return [];
	}

	try {
		return await withTimeout(source(), timeoutMs, () => []);
	} catch {
		return [];
	}
}

export function answerScrape(channel: MetricsChannel, {id}: MetricsRequestMessage): void {
	void collectMetrics(channel).then(metrics => {
		channel.send({type: 'metrics', id, metrics: metrics as never});
	});
}

/** Before `drained`: IPC keeps the order, so the primary has them when it learns the worker is leaving. */
export async function sendFinalMetrics(channel: MetricsChannel): Promise<void> {
	if (!channel.metrics) {
		return;
	}

	const metrics = await collectMetrics(channel, FINAL_METRICS_MS);
	await new Promise<void>(resolve => {
		channel.send({type: 'metrics', id: 0, metrics: metrics as never}, resolve);
	});
}
