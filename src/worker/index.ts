/**
 * The worker helper apps load: `import {attach} from 'graceful-cluster/worker'`
 * (or `require`). Kept light, with no top-level await, so CommonJS apps can
 * `require()` it on Node 20.19+: only `node:` built-ins.
 *
 * Under the graceful-cluster CLI the primary drives the drain over IPC; run with
 * plain `node server.js` the helper drains the process itself on SIGTERM/SIGINT,
 * with the same timeline read from `GRACEFUL_CLUSTER_*`.
 */
import net from 'node:net';
import {systemClock} from '../clock.js';
import {damagedFiles} from '../install-check.js';
import {createLogger, logLevelFromEnv} from '../logger.js';
import {settingsFromEnv, workerSettingsFromEnv, type WorkerSettings} from '../settings.js';
import {ExitCode} from '../exit-codes.js';
import {UsageError} from '../errors.js';
import type {Timeline} from '../timeline.js';
import {getChannel} from './channel.js';
import {joinCluster} from './cluster-host.js';
import {ProcessDrain} from './drain.js';
import {drainableKind, type DrainableServer} from './filter.js';
import type {ShutdownHook} from './hooks.js';
import type {DrainListener} from './long-lived.js';
import {isMetricsRegistry, shareMetrics, type MetricsRegistry} from './metrics.js';
import {Readiness, type ReadinessChecks} from './readiness.js';
import {runStandalone} from './standalone.js';
import {Warmup} from './warmup.js';
import {readWorkerEnv} from '../worker-env.js';

import type {PhaseName} from './phase.js';
export type {PhaseName} from './phase.js';
export type {ShutdownHook} from './hooks.js';
export type {DrainListener, DrainNotice, DrainReason} from './long-lived.js';
export type {MetricsRegistry} from './metrics.js';
export type {ReadinessCheck, ReadinessChecks} from './readiness.js';

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
	 * still run. They must finish before the grace period ends. A hook may end
	 * the process itself (`process.exit(0)`): the drain is still clean. The app's
	 * own `process.on('SIGTERM' | 'SIGINT')` listeners run after these, once each.
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
	/** Requests of this process's attached servers that the app is still handling (event streams apart). */
	readonly inflight: number;
	/** Upgraded connections (WebSockets) of this process's attached servers still open. */
	readonly upgrades: number;
	/** Event-stream responses (`text/event-stream`) of this process's attached servers still open. */
	readonly streams: number;
	/** Takes the request filter off this server (it then serves as if never attached). */
	detach(): void;
}

let processDrain: ProcessDrain | undefined;
/** Set in a reload's or a recycle's replacement while it warms up (warmup.ts). */
let warmup: Warmup | undefined;

function setUp(): ProcessDrain {
	// The helper the app loaded may be its own copy of the package, not the CLI's:
	// a partial one is said now, as the app starts, rather than at its drain, when
	// its logger would fail at the first line and cut the requests in flight.
	// No URL of its own where a bundler put it into the app's CommonJS build
	// (esbuild leaves import.meta empty there): no files of ours to check.
	const damaged = (import.meta.url as string | undefined) ? damagedFiles(new URL('../graceful-cluster-files.json', import.meta.url), 'worker/') : [];
	if (damaged.length > 0) {
		throw new Error(`graceful-cluster/worker: its installation is incomplete: ${damaged.join('; ')}. Reinstall graceful-cluster with its dependencies (npm ci).`);
	}

	const channel = getChannel();
	let settings: WorkerSettings;
	let timeline: Timeline | undefined;
	try {
		// Under the CLI the timeline comes with the drain message; alone, from the environment.
		if (channel) {
			settings = workerSettingsFromEnv(process.env);
		} else {
			const all = settingsFromEnv(process.env);
			settings = all;
			timeline = all;
			logLevelFromEnv(process.env);
		}
	} catch (error) {
		// A malformed GRACEFUL_CLUSTER_* value: better to stop at start than to drain
		// on a timeline nobody meant. Under the CLI the primary set these variables
		// itself, so this is a standalone app: exit as the CLI does on bad input.
		if (error instanceof UsageError && !channel) {
			process.stderr.write(`graceful-cluster: ${error.message}\n`);
			process.exit(ExitCode.USAGE);
		}

		throw error;
	}

	const level = logLevelFromEnv(process.env);
	if (channel) {
		const logger = createLogger({role: 'worker', level, workerId: channel.workerId});
		const {replacement, peerRates} = readWorkerEnv(process.env);
		const drain = new ProcessDrain(settings, logger, systemClock, {peerRates});
		if (replacement) {
			const started = new Warmup(message => {
				channel.send(message);
			}, logger);
			channel.serveNow = () => {
				started.serveNow();
			};
			warmup = started;
		}

		joinCluster(drain, channel, logger, warmup);
		return drain;
	}

	const logger = createLogger({role: 'standalone', level});
	// Alone, nothing reads the peers' rates: no primary, no /status.
	const drain = new ProcessDrain(settings, logger, systemClock, {peerRates: false});
	runStandalone(drain, logger, timeline!);
	return drain;
}

/** What attach() was given, for its TypeError. */
function describe(value: unknown): string {
	if (value === null || value === undefined) {
		return String(value);
	}

	if (typeof value === 'function') {
		return 'a function (an Express or Koa app? pass the server that app.listen() returns)';
	}

	if (value instanceof net.Server) {
		// node:tls only on this error path: importing it would slow every worker's start.
		return `a ${value instanceof process.getBuiltinModule('node:tls').Server ? 'tls' : 'net'}.Server, which is not an HTTP server`;
	}

	return typeof value === 'object' ? `an object (${value.constructor?.name ?? 'no prototype'})` : `a ${typeof value}`;
}

/**
 * Puts graceful-cluster's request filter in front of `server`: any `node:http` or
 * `node:https` server (raw, Express's `app.listen()`, `fastify.server`, Koa's
 * `app.listen()`), or a `node:http2` one (`http2.createServer()`,
 * `http2.createSecureServer()`, with or without `allowHTTP1`). Call it once per
 * server, before or after `listen()`.
 */
export function attach(server: DrainableServer, options: AttachOptions = {}): GracefulHandle {
	if (drainableKind(server) === undefined) {
		throw new TypeError(`graceful-cluster: attach(server) takes a server made by http.createServer(), https.createServer(), http2.createServer() or http2.createSecureServer() (or a framework's, such as Express's app.listen() or fastify.server); it got ${describe(server)}.`);
	}

	const {metricsRegistry} = options;
	if (metricsRegistry !== undefined && !isMetricsRegistry(metricsRegistry)) {
		throw new TypeError('graceful-cluster: attach(server, {metricsRegistry}) takes a prom-client Registry (client.register, or new client.Registry()).');
	}

	processDrain ??= setUp();
	const drain = processDrain;
	const channel = getChannel();
	if (metricsRegistry && channel) {
		shareMetrics(channel, metricsRegistry);
	}

	// Made first: checks that are not functions throw before the server is filtered.
	const readiness = options.readinessChecks === undefined
		? undefined
		: new Readiness(options.readinessChecks, workerSettingsFromEnv(process.env).checkTimeoutMs, failures => {
			drain.logFailedChecks(failures);
		});
	const filter = drain.addServer(server, warmup ? warmup.probeFor(readiness) : readiness);
	warmup?.add(server, readiness);

	const handle: GracefulHandle = {
		onShutdown(hook) {
			drain.addHook(hook);
			return handle;
		},
		onDrain(listener) {
			drain.addDrainListener(listener);
			return handle;
		},
		get phase() {
			return drain.phaseName;
		},
		get draining() {
			return drain.phaseName !== 'serving';
		},
		get inflight() {
			return drain.inflight;
		},
		get upgrades() {
			return drain.counts.upgrades;
		},
		get streams() {
			return drain.counts.streams;
		},
		detach() {
			drain.removeServer(filter);
		},
	};
	return handle;
}
