/**
 * The app's side of `/metrics`: `attach(server, {metricsRegistry: client.register})`
 * hands the primary the app's prom-client registry. The primary asks every worker
 * for `getMetricsAsJSON()` on each scrape (the channel answers, channel.ts) and
 * aggregates them the way prom-client's `AggregatorRegistry.aggregate` does; a
 * worker leaving on purpose sends its final values first, so the app's counters
 * never go down in the cluster's sum.
 *
 * No prom-client here: the registry is the app's own copy, used through the one
 * method the primary needs. The helper stays light for CommonJS apps.
 */
import type {WorkerChannel} from './channel.js';
import {collectMetrics} from './channel.js';

/** Any prom-client `Registry` (the app's copy, whichever 15.x): the one method we call. */
export interface MetricsRegistry {
	getMetricsAsJSON(): Promise<unknown> | unknown;
}

/** A leaving worker waits at most this long for its registry's final values. */
const FINAL_METRICS_MS = 1000;

export function isMetricsRegistry(value: unknown): value is MetricsRegistry {
	return typeof value === 'object' && value !== null && typeof (value as MetricsRegistry).getMetricsAsJSON === 'function';
}

/** Answers the primary's scrapes from `registry` (the last attach() that gives one wins). */
export function shareMetrics(channel: WorkerChannel, registry: MetricsRegistry): void {
	channel.metrics = async () => registry.getMetricsAsJSON();
}

/**
 * The final values, before `drained`: IPC keeps the order, so the primary has
 * them when it learns the worker is leaving. Nothing to send without a registry.
 */
export async function sendFinalMetrics(channel: WorkerChannel): Promise<void> {
	if (!channel.metrics) {
		return;
	}

	const metrics = await collectMetrics(channel, FINAL_METRICS_MS);
	await new Promise<void>(resolve => {
		channel.send({type: 'metrics', id: 0, metrics: metrics as never}, resolve);
	});
}
