/**
 * A replacement warming up: the new worker of a reload or a recycle takes no
 * connections until the app's readiness checks pass, and the old worker of its slot
 * serves until then (primary/reload.ts): a pool still connecting must not see requests.
 *
 * Under node:cluster's round-robin, a worker whose server is at its `maxConnections`
 * answers "not accepted" and the primary hands the connection to another
 * (nodejs/node lib/internal/cluster/child.js `onconnection`, round_robin_handle.js
 * `handoff`). A negative limit refuses every one (Node tests it only for
 * truthiness; 0 would mean "no limit"). A server with a handle of its own
 * (`listen({exclusive: true})`, `NODE_CLUSTER_SCHED_POLICY=none`) would drop refused
 * connections instead: it is left alone.
 *
 * Should no other worker serve (the old one crashed), the primary says `serve-now`
 * and the refusals end: refused connections would only wait in its queue. While
 * warming, the readiness probe answers 200: the pod's other workers serve.
 */
import cluster from 'node:cluster';
import type * as net from 'node:net';
import type {Logger} from '../logger.js';
import {MAX_TEXTS, type ToPrimary} from '../protocol.js';
import type {Readiness, ReadinessProbe} from './readiness.js';

/** Each pass costs the app one run of every check (a `select 1`); a ready worker waits at most this long to say so. */
export const WARM_POLL_MS = 200;

const REFUSE_ALL = -1;

type WarmupState = 'warming' | 'ready' | 'stopped';

function sharesRoundRobin(server: net.Server): boolean {
	// The round-robin's stand-in handle is a plain object without a file descriptor.
	const handle = (server as net.Server & {_handle?: {fd?: unknown} | null})._handle;
	return handle !== null && handle !== undefined && typeof handle.fd !== 'number';
}

export class Warmup {
	private state: WarmupState = 'warming';
	private mustServe = false;
	private readonly refusing = new Map<net.Server, number | undefined>();
	private readonly checks: Readiness[] = [];
	private timer: NodeJS.Timeout | undefined;
	/** The failures last told to the primary: sent again only when they change. */
	private told = '';

	constructor(
		private readonly send: (message: ToPrimary) => void,
		private readonly logger: Logger,
		private readonly roundRobin = cluster.schedulingPolicy === cluster.SCHED_RR,
	) {}

	get warming(): boolean {
		return this.state === 'warming';
	}

	add(server: net.Server): void {
		if (this.state !== 'warming') {
			return;
		}

		if (this.roundRobin && !this.mustServe && !this.refusing.has(server) && (!server.listening || sharesRoundRobin(server))) {
			this.refusing.set(server, server.maxConnections);
			// An accessor: an app that sets its own limit after attach() would otherwise end the
			// warm-up silently. Its value is kept and applied once ready.
			Object.defineProperty(server, 'maxConnections', {
				configurable: true,
				enumerable: true,
				get: () => REFUSE_ALL,
				set: (value: number) => {
					this.refusing.set(server, value);
				},
			});
			// An exclusive listen gets a handle of its own: a refusal would drop the connection.
			server.on('listening', () => {
				if (!sharesRoundRobin(server)) {
					this.release(server);
				}
			});
		}

		this.look();
	}

	addChecks(readiness: Readiness): void {
		if (this.state === 'warming') {
			this.checks.push(readiness);
			this.look();
		}
	}

	/** On the next turn: a server and the checks attach() gives it in the same turn are checked together. */
	private look(): void {
		this.timer ??= setTimeout(this.poll, 0).unref();
	}

	probeFor(readiness: Readiness | undefined): ReadinessProbe | undefined {
		return readiness && {probe: async () => (this.warming ? undefined : readiness.probe())};
	}

	serveNow(): void {
		this.mustServe = true;
		if (this.refusing.size > 0) {
			this.logger.warn({}, 'no other worker serves: taking connections before the readiness checks pass');
			for (const server of [...this.refusing.keys()]) {
				this.release(server);
			}
		}
	}

	/** A server still refusing stays so: the drain closes it. */
	stop(): void {
		if (this.state === 'warming') {
			this.state = 'stopped';
			clearTimeout(this.timer);
		}
	}

	private readonly poll = (): void => {
		void Promise.all(this.checks.map(async readiness => readiness.run())).then(results => {
			if (this.state !== 'warming') {
				return;
			}

			const failures = results.flatMap(result => result.failures);
			if (failures.length === 0) {
				this.ready();
				return;
			}

			const text = failures.join('\n');
			if (text !== this.told) {
				this.told = text;
				this.logger.debug({failures}, 'warming up: the readiness checks do not pass yet; the old worker keeps serving');
				this.send({type: 'not-ready', failures: failures.slice(0, MAX_TEXTS).map(failure => failure.slice(0, 4096))});
			}

			this.timer = setTimeout(this.poll, WARM_POLL_MS).unref();
		});
	};

	private ready(): void {
		this.state = 'ready';
		for (const server of [...this.refusing.keys()]) {
			this.release(server);
		}

		this.logger.info({checks: this.checks.length}, 'warmed up: the readiness checks pass; taking connections');
		this.send({type: 'ready'});
	}

	/** Also for a server the app left out (`exclude()`). */
	release(server: net.Server): void {
		if (!this.refusing.has(server)) {
			return;
		}

		const own = this.refusing.get(server);
		this.refusing.delete(server);
		delete (server as Partial<net.Server>).maxConnections;
		if (own !== undefined) {
			server.maxConnections = own;
		}
	}
}
