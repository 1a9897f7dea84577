/**
 * What the app holds: `attach()`'s options and the handle it returns, the
 * helper's public types (index.ts exports them).
 */
import type {ShutdownHook} from './hooks.js';
import type {DrainListener} from './long-lived.js';
import type {MetricsRegistry} from './metrics.js';
import type {PhaseName} from './phase.js';
import type {ReadinessChecks} from './readiness.js';

export interface AttachOptions {
	/**
	 * The app's prom-client registry (`client.register`, or any `Registry`): its
	 * metrics join the primary's `/metrics` (with `--metrics`), summed over the
	 * workers as prom-client's `AggregatorRegistry` does. Ignored in standalone mode.
	 */
	readonly metricsRegistry?: MetricsRegistry;
	/**
	 * Run by the readiness probe while serving, concurrently, each bounded by
	 * `--check-timeout`: 200 when all pass, 503 naming each that throws, rejects,
	 * returns `false` or times out. Never run by the liveness probe, nor during a
	 * drain (503 at once).
	 */
	readonly readinessChecks?: ReadinessChecks;
}

export interface GracefulHandle {
	/**
	 * Registers a function to run once the drain has finished every request, before
	 * the process exits: close database pools, flush queues. Hooks run one after
	 * another in the order registered; a hook that throws is logged and the rest
	 * still run. They must finish before the grace period ends. The app's own
	 * `process.on('SIGTERM' | 'SIGINT')` listeners run after these, once each.
	 */
	onShutdown(hook: ShutdownHook): GracefulHandle;
	/**
	 * Registers a function told once, when the drain starts or a reload retires
	 * this worker, with `{reason: 'shutdown' | 'reload', closeInMs, closeCode}`:
	 * close your WebSockets (with `closeCode`: 1001, or 1012 for a reload; spread
	 * out over `closeInMs` if you like) and end your event streams. Whatever is
	 * still open after `closeInMs` is closed by graceful-cluster. Called at once
	 * if the drain already started. A function that throws is logged.
	 */
	onDrain(listener: DrainListener): GracefulHandle;
	/**
	 * `'serving'` until the drain starts, then `'serve'`, `'reject'`, `'closing'`,
	 * `'hooks'`, `'done'`; or `'retiring'` when a reload replaces this worker.
	 */
	readonly phase: PhaseName;
	/** True from the first moment of a drain. */
	readonly draining: boolean;
	/** Requests of this process's drained servers that the app is still handling (event streams apart). */
	readonly inflight: number;
	/** Upgraded connections (WebSockets) of this process's drained servers still open. */
	readonly upgrades: number;
	/** Event-stream responses (`text/event-stream`) of this process's drained servers still open. */
	readonly streams: number;
	/** Leaves this server out of the drain from now on, as `exclude(server)` does. */
	detach(): void;
}
