/** A process's servers and its one drain: a server is filtered once, whether the bootstrap took it as it listened or the app attached it first. */
import * as net from 'node:net';
import type {WorkerChannel} from './channel.js';
import type {ProcessDrain} from './drain.js';
import {addressOf, drainableKind, isExcluded, markExcluded, type DrainableServer, type ServerFilter} from './filter.js';
import type {AttachOptions, GracefulHandle} from './handle.js';
import {isMetricsRegistry, shareMetrics} from './metrics.js';
import {Readiness} from './readiness.js';
import type {Warmup} from './warmup.js';

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

export function checkExcludable(server: unknown): asserts server is net.Server {
	if (!(server instanceof net.Server)) {
		throw new TypeError(`graceful-cluster: exclude(server) takes a server (a node:net, node:http, node:https or node:http2 one, such as the one Express's app.listen() returns); it got ${describe(server)}.`);
	}
}

export interface AttachmentsContext {
	readonly channel?: WorkerChannel | undefined;
	readonly warmup?: Warmup | undefined;
	readonly checkTimeoutMs: number;
	/** A server the app left out after the drain took it: the primary stops counting its address as covered. */
	readonly uncovers?: ((address: string) => void) | undefined;
}

export class Attachments {
	private readonly filters = new Map<net.Server, ServerFilter>();

	constructor(readonly drain: ProcessDrain, private readonly context: AttachmentsContext) {}

	take(server: DrainableServer): boolean {
		if (!this.filters.has(server) && !isExcluded(server)) {
			this.add(server);
		}

		return this.filters.has(server);
	}

	has(server: net.Server): boolean {
		return this.filters.has(server);
	}

	/** The drain takes it if it has not yet; the options apply either way. */
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

	/** Its counts so far stay in `requests`. */
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
