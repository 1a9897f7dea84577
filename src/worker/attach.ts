/**
 * A process's servers and its one drain: the bootstrap's `take` as a server
 * begins to listen, the app's `attach(server, options)` (options and the
 * handle), `exclude()`. A server is filtered once, whichever came first.
 */
import * as net from 'node:net';
import type {WorkerChannel} from './channel.js';
import type {ProcessDrain} from './drain.js';
import {addressOf, drainableKind, isExcluded, markExcluded, type DrainableServer, type ServerFilter} from './filter.js';
import type {ShutdownHook} from './hooks.js';
import type {DrainListener} from './long-lived.js';
import {isMetricsRegistry, shareMetrics, type MetricsRegistry} from './metrics.js';
import type {PhaseName} from './phase.js';
import {Readiness, type ReadinessChecks} from './readiness.js';
import type {Warmup} from './warmup.js';

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

/** A @grpc/grpc-js `Server`: it keeps its node:http2 servers to itself. */
const isGrpcServer = (value: unknown): boolean => typeof (value as {bindAsync?: unknown} | null)?.bindAsync === 'function' && typeof (value as {tryShutdown?: unknown}).tryShutdown === 'function';

/** Throws the TypeError attach() owes a value it cannot take. */
export function checkAttachable(server: unknown, options: AttachOptions): asserts server is DrainableServer {
	if (isGrpcServer(server)) {
		throw new TypeError('graceful-cluster: attach() got a @grpc/grpc-js Server, which keeps its HTTP/2 server to itself. Under the graceful-cluster CLI it needs no attach(): its HTTP/2 server is drained as it listens (new calls get UNAVAILABLE, calls in flight finish), and the app\'s own process.on(\'SIGTERM\', () => server.tryShutdown(...)) runs after them. Remove the call.');
	}

	if (drainableKind(server) === undefined) {
		throw new TypeError(`graceful-cluster: attach(server) takes a server made by http.createServer(), https.createServer(), http2.createServer() or http2.createSecureServer() (or a framework's, such as Express's app.listen() or fastify.server); it got ${describe(server)}.`);
	}

	if (options.metricsRegistry !== undefined && !isMetricsRegistry(options.metricsRegistry)) {
		throw new TypeError('graceful-cluster: attach(server, {metricsRegistry}) takes a prom-client Registry (client.register, or new client.Registry()).');
	}
}

/** Throws the TypeError exclude() owes a value that is not a server. */
export function checkExcludable(server: unknown): asserts server is net.Server {
	if (!(server instanceof net.Server)) {
		throw new TypeError(`graceful-cluster: exclude(server) takes a server (a node:net, node:http, node:https or node:http2 one, such as the one Express's app.listen() returns); it got ${describe(server)}.`);
	}
}

export interface AttachmentsContext {
	/** Under the CLI: where the app's metrics go. */
	readonly channel?: WorkerChannel | undefined;
	/** In a reload's or a recycle's replacement: holds connections until the readiness checks pass. */
	readonly warmup?: Warmup | undefined;
	readonly checkTimeoutMs: number;
	/** A server the drain had taken listens on `address` no more for the drain (`exclude`): the primary stops counting it as covered. */
	readonly uncovers?: ((address: string) => void) | undefined;
}

/** The servers of one process's drain. */
export class Attachments {
	private readonly filters = new Map<net.Server, ServerFilter>();

	constructor(readonly drain: ProcessDrain, private readonly context: AttachmentsContext) {}

	/**
	 * A server begins to listen (the bootstrap): the drain takes it unless the
	 * app left it out. True when the drain has it.
	 */
	take(server: DrainableServer): boolean {
		if (!this.filters.has(server) && !isExcluded(server)) {
			this.add(server);
		}

		return this.filters.has(server);
	}

	/** True when the drain has `server`. */
	has(server: net.Server): boolean {
		return this.filters.has(server);
	}

	/** `attach(server, options)`: the drain takes it if it has not yet; the options apply either way. */
	attach(server: DrainableServer, options: AttachOptions = {}): GracefulHandle {
		checkAttachable(server, options);
		const {channel, warmup, checkTimeoutMs} = this.context;
		if (options.metricsRegistry && channel) {
			shareMetrics(channel, options.metricsRegistry);
		}

		// Made first: checks that are not functions throw before the server is filtered.
		const readiness = options.readinessChecks === undefined
			? undefined
			: new Readiness(options.readinessChecks, checkTimeoutMs, failures => {
				this.drain.logFailedChecks(failures);
			});
		markExcluded(server, false);
		const filter = this.filters.get(server) ?? this.add(server);
		if (readiness) {
			filter.setReadiness(warmup?.probeFor(readiness) ?? readiness);
			warmup?.addChecks(readiness);
		}

		const {drain} = this;
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
			detach: () => {
				this.exclude(server);
			},
		};
		return handle;
	}

	/** `exclude(server)`: the drain leaves it (and its counts so far: they stay in `requests`). */
	exclude(server: net.Server): void {
		markExcluded(server, true);
		const filter = this.filters.get(server);
		if (filter) {
			this.filters.delete(server);
			this.drain.removeServer(filter);
			this.context.warmup?.release(server);
			const address = server.address();
			if (address) {
				this.context.uncovers?.(addressOf(address));
			}
		}
	}

	private add(server: DrainableServer): ServerFilter {
		const filter = this.drain.addServer(server);
		this.filters.set(server, filter);
		this.context.warmup?.add(server);
		return filter;
	}
}
