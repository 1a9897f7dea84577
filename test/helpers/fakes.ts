/**
 * Fakes for the primary's process edges (src/primary/edges.ts) and for time
 * (src/clock.ts): unit tests run the drain, the reload and the restart backoff
 * exactly, with no process, no socket and no sleep.
 */
import {EventEmitter} from 'node:events';
import type {Clock, Timer} from '../../src/clock.js';
import type {ExitCode} from '../../src/exit-codes.js';
import {createLogger, type Logger} from '../../src/logger.js';
import {Primary} from '../../src/primary/index.js';
import {DEFAULT_PRIMARY_OPTIONS, type PrimaryOptions} from '../../src/primary/options.js';
import {DEFAULT_SETTINGS} from '../../src/settings.js';
import type {ClusterEdge, ProcessEdges, WorkerHandle} from '../../src/primary/edges.js';
import {envelope, type ToPrimary} from '../../src/protocol.js';
import {Readiness} from '../../src/worker/readiness.js';

interface Pending {
	at: number;
	readonly fn: () => void;
	readonly every: number | undefined;
}

/** A clock that moves only when told to; timers fire in order of their time, then of creation. */
export class FakeClock implements Clock {
	private time = 0;
	private sequence = 0;
	private readonly pending = new Map<number, Pending>();

	now(): number {
		return this.time;
	}

	setTimeout(fn: () => void, ms: number): Timer {
		return this.add(fn, ms, undefined);
	}

	setInterval(fn: () => void, ms: number): Timer {
		return this.add(fn, ms, Math.max(1, ms));
	}

	clear(timer: Timer | undefined): void {
		this.pending.delete(timer as unknown as number);
	}

	/** Moves time forward by `ms`, firing every timer due on the way. */
	advance(ms: number): void {
		const target = this.time + ms;
		for (;;) {
			let next: [number, Pending] | undefined;
			for (const entry of this.pending) {
				if (entry[1].at <= target && (!next || entry[1].at < next[1].at)) {
					next = entry;
				}
			}

			if (!next) {
				break;
			}

			const [id, timer] = next;
			this.time = timer.at;
			if (timer.every === undefined) {
				this.pending.delete(id);
			} else {
				timer.at += timer.every;
			}

			timer.fn();
		}

		this.time = target;
	}

	/** Timers still waiting (intervals included). */
	get waiting(): number {
		return this.pending.size;
	}

	private add(fn: () => void, ms: number, every: number | undefined): Timer {
		const id = ++this.sequence;
		this.pending.set(id, {at: this.time + Math.max(0, ms), fn, every});
		return id as unknown as Timer;
	}
}

/** A worker process as the fleet sees it; the test plays its part. */
export class FakeWorker extends EventEmitter implements WorkerHandle {
	readonly stdout = null;
	readonly stderr = null;
	readonly pid: number;
	/** Messages the primary sent, unwrapped from the envelope. */
	readonly received: Array<Record<string, unknown>> = [];
	readonly signals: NodeJS.Signals[] = [];
	connected = true;
	disconnectCalls = 0;

	constructor(readonly id: number, readonly env: Readonly<Record<string, string>>) {
		super();
		this.pid = 1000 + id;
	}

	send(message: unknown, callback: (error: Error | null) => void): void {
		const unwrapped = (message as {gracefulCluster: Record<string, unknown>}).gracefulCluster;
		this.received.push(unwrapped);
		callback(null);
		// The adaptive rule's last look: a drained worker answers with its figures as they stand.
		const answer = typeof this.answersReportNow === 'object' ? this.answersReportNow : this.answersReportNow ? this.lastReport : undefined;
		if (unwrapped['type'] === 'report-now' && answer) {
			this.say({...answer, reportId: unwrapped['id'] as number});
		}
	}

	/** Its last `inflight`, which a `report-now` is answered with. */
	private lastReport: Extract<ToPrimary, {type: 'inflight'}> | undefined;
	/** False: a worker too busy (or too old) to answer `report-now`; a report: its answer (an arrival its reports had not shown). */
	answersReportNow: boolean | Extract<ToPrimary, {type: 'inflight'}> = true;

	isConnected(): boolean {
		return this.connected;
	}

	disconnect(): void {
		this.disconnectCalls++;
	}

	kill(signal: NodeJS.Signals): void {
		this.signals.push(signal);
	}

	/** The types of the messages received, in order. */
	get types(): unknown[] {
		return this.received.map(message => message['type']);
	}

	/** Listens on `port`; a worker that drains says first that a drained server covers it, as a real one does. */
	listen(port = 3000): this {
		if (this.draining) {
			this.say({type: 'covers', address: String(port)});
		}

		this.emit('listening', {address: '127.0.0.1', port, addressType: 4});
		return this;
	}

	say(message: ToPrimary): this {
		if (message.type === 'inflight') {
			this.lastReport = message;
		}

		this.emit('message', envelope(message));
		return this;
	}

	/** Has a server to drain (attach(), or one the bootstrap took): said once, before it listens. */
	private draining = false;

	attach(): this {
		this.draining = true;
		return this.say({type: 'attached'});
	}

	/** A heartbeat from the worker's main loop (protocol.ts HeartbeatMessage); zeros unless given. */
	beat(fields: Partial<Omit<Extract<ToPrimary, {type: 'heartbeat'}>, 'type'>> = {}): this {
		return this.say({type: 'heartbeat', rssBytes: 0, heapUsedBytes: 0, loopDelayMs: 0, requests: 0, inflight: 0, ...fields});
	}

	drained(served = 0): this {
		return this.say({type: 'drained', served, rejected: 0, durationMs: 1, closedLongLived: 0});
	}

	/** The process exits and its channel closes, in Node's usual order. */
	exit(code: number | null = 0, signal: NodeJS.Signals | null = null): this {
		this.emit('exit', code, signal);
		this.closeChannel();
		return this;
	}

	closeChannel(): void {
		this.connected = false;
		this.emit('disconnect');
	}
}

export class FakeCluster implements ClusterEdge {
	readonly workers: FakeWorker[] = [];
	private nextId = 1;

	setupPrimary(): void {}

	onStranded(): void {}

	fork(env: Readonly<Record<string, string>>): FakeWorker {
		const worker = new FakeWorker(this.nextId++, env);
		this.workers.push(worker);
		return worker;
	}

	/** Workers not yet exited. */
	get live(): FakeWorker[] {
		return this.workers.filter(worker => worker.connected);
	}
}

export interface FakeEdges extends ProcessEdges {
	readonly clock: FakeClock;
	readonly cluster: FakeCluster;
	/** Delivers a signal to the primary's handler. */
	signal(signal: NodeJS.Signals): void;
	readonly handled: ReadonlySet<NodeJS.Signals>;
}

export function fakeEdges(): FakeEdges {
	const handlers = new Map<NodeJS.Signals, (signal: NodeJS.Signals) => void>();
	return {
		clock: new FakeClock(),
		cluster: new FakeCluster(),
		onSignal(signal, handler) {
			handlers.set(signal, handler);
		},
		signal(signal) {
			const handler = handlers.get(signal);
			if (!handler) {
				throw new Error(`no handler for ${signal}: the real process would die`);
			}

			handler(signal);
		},
		get handled() {
			return new Set(handlers.keys());
		},
	};
}

export type Line = Record<string, unknown> & {msg: string; level: string};

/** A logger whose lines the test can read, synchronously. */
export function captureLogger(role: 'primary' | 'worker' = 'primary'): {logger: Logger; lines: Line[]; messages: () => string[]} {
	const lines: Line[] = [];
	const destination = {
		write(text: string) {
			for (const line of text.split('\n')) {
				if (line) {
					lines.push(JSON.parse(line) as Line);
				}
			}
		},
	};
	const logger = createLogger({role, level: 'trace', destination});
	return {logger, lines, messages: () => lines.map(line => line.msg)};
}

/** Readiness with one check, `db`, that passes while `ok` and counts its `runs`. */
export function switchableCheck(): {readiness: Readiness; ok: boolean; runs: number} {
	const state = {ok: true, runs: 0};
	const readiness = new Readiness({
		db() {
			state.runs++;
			return state.ok;
		},
	}, 1000);
	return Object.assign(state, {readiness});
}

/** The timeline the primary's unit tests run on: a serve phase, a reject phase, a deadline. */
export const FAKE_TIMELINE = {servePeriodMs: 1000, rejectPeriodMs: 4000, gracePeriodMs: 30_000} as const;

/**
 * A whole primary on fake workers and a fake clock, started: the rig of the
 * primary's unit tests (drain, reload, restarts, health, metrics).
 */
export function fakePrimary(overrides: Partial<PrimaryOptions> = {}) {
	const edges = fakeEdges();
	const {logger, lines, messages} = captureLogger();
	const sink = {write() {}};
	const options: PrimaryOptions = {
		...DEFAULT_PRIMARY_OPTIONS,
		script: '/app/server.js',
		args: [],
		workers: 2,
		settings: {...DEFAULT_SETTINGS, ...FAKE_TIMELINE},
		listenTimeoutMs: 10_000,
		maxStartFailures: 3,
		restartDelayMs: 100,
		maxRestartDelayMs: 1000,
		backoffResetMs: 30_000,
		// Fake workers beat only when a test says so: the watchdog is off unless it turns it on.
		workerTimeoutMs: 0,
		...overrides,
	};
	const primary = new Primary(options, {logger, stdout: sink, stderr: sink}, edges);
	let code: ExitCode | undefined;
	const done = primary.run().then(result => {
		code = result;
		return result;
	});
	const {clock, cluster} = edges;
	const listened = new WeakSet<FakeWorker>();
	return {
		primary,
		logger,
		edges,
		clock,
		cluster,
		lines,
		messages,
		done,
		/** The exit code once settled (promises run between the test's awaits). */
		code: () => code,
		line: (msg: string) => lines.find(line => line.msg === msg),
		all: (msg: string) => lines.filter(line => line.msg === msg),
		/** Every worker forked so far and not yet listening attaches the helper and listens; returns the live ones. */
		serveAll(): FakeWorker[] {
			for (const worker of cluster.workers) {
				if (worker.connected && !listened.has(worker)) {
					listened.add(worker);
					worker.attach().listen();
				}
			}

			return cluster.live;
		},
		/** Advances time by `ms` in 1 s steps, each of `beating` sending a heartbeat first. */
		run(ms: number, beating: readonly FakeWorker[], fields: Parameters<FakeWorker['beat']>[0] = {}) {
			for (let spent = 0; spent < ms; spent += 1000) {
				for (const worker of beating) {
					if (worker.connected) {
						worker.beat(fields);
					}
				}

				clock.advance(Math.min(1000, ms - spent));
			}
		},
	};
}

/** Lets pending promise callbacks and I/O callbacks run. */
export const flush = async (): Promise<void> => new Promise(resolve => {
	setImmediate(resolve);
});
