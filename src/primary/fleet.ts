/**
 * The fleet's plumbing: forking workers, their IPC, their output, killing and
 * disconnecting them, and following each through its lifecycle. It decides
 * nothing; the supervisor and the primary listen to its events:
 *
 *   forked    a worker was started
 *   listening it listens (the first time)
 *   address   it listens on an address (each time, the first included)
 *   message   one of our IPC messages from it, already applied to its record
 *   killed    we sent it SIGKILL
 *   gone      it exited and its channel closed
 */
import {EventEmitter} from 'node:events';
import type {Address} from 'node:cluster';
import {pEvent} from 'p-event';
import {TimerGroup, withTimeout, type Clock} from '../clock.js';
import type {Logger} from '../logger.js';
import {envelope, parseMessage, TO_PRIMARY, type ToPrimary, type ToWorker} from '../protocol.js';
import type {ProcessEdges} from './edges.js';
import {LastLines, LineForwarder, type LineSink} from './output.js';
import {replacementEnv} from '../worker-env.js';
import {messageHandlers} from './worker-messages.js';
import {isPlaced, uncovered, type KillReason, type RetireReason, type Role, type StartReason, type WorkerRecord} from './worker-record.js';

export interface FleetOptions {
	readonly script: string;
	readonly args: readonly string[];
	/** Where workers start; a path through a symlink is followed anew at each fork. */
	readonly cwd?: string | undefined;
	readonly execArgv: readonly string[];
	readonly env: Readonly<Record<string, string>>;
	readonly logger: Logger;
	/** Where the workers' output goes: the same writers the primary logs through. */
	readonly stdout: LineSink;
	readonly stderr: LineSink;
}

export interface FleetEvents {
	forked: [record: WorkerRecord];
	listening: [record: WorkerRecord];
	address: [record: WorkerRecord];
	message: [record: WorkerRecord, message: ToPrimary];
	gone: [record: WorkerRecord];
	killed: [record: WorkerRecord];
}

const MAX_INVALID_LOGS = 5;
/** After a worker's exit, how long to wait for its channel to close: only a net under a platform that never says so. */
const CHANNEL_CLOSE_WAIT_MS = 1000;
/** Long enough for a listening worker's `covers` reports to arrive. */
const COVERAGE_CHECK_MS = 1000;

/** How an address reads in the log: `host:port`, or a unix socket's path. */
export function formatAddress(address: Address): string {
	if (address.addressType === -1 || address.port === -1) {
		return String(address.address);
	}

	const host = address.address ?? '*';
	return host.includes(':') ? `[${host}]:${address.port}` : `${host}:${address.port}`;
}

export class Fleet extends EventEmitter<FleetEvents> {
	private readonly records = new Map<number, WorkerRecord>();
	private readonly clock: Clock;
	private readonly timers: TimerGroup;
	private invalidLogs = 0;
	/** Uncovered addresses already warned about: once per address, not once per restart. */
	private readonly warnedUncovered = new Set<string>();
	/** Workers' output streams not yet ended: their last lines may still be in the pipes. */
	private readonly pendingOutput = new Set<Promise<void>>();

	private readonly handlers = messageHandlers({
		now: () => this.clock.now(),
		listened: (record, where) => {
			this.listened(record, where);
		},
	});

	constructor(private readonly options: FleetOptions, private readonly edges: ProcessEdges) {
		super();
		this.clock = edges.clock;
		this.timers = new TimerGroup(edges.clock);
		edges.cluster.setupPrimary({exec: options.script, args: options.args, execArgv: options.execArgv, cwd: options.cwd});
	}

	/** Workers not yet gone, in the order they were forked. */
	get alive(): WorkerRecord[] {
		return [...this.records.values()];
	}

	fork(slot: number, role: Role = 'member', startReason: StartReason = 'initial'): WorkerRecord {
		const handle = this.edges.cluster.fork(role === 'candidate' ? {...this.options.env, ...replacementEnv} : this.options.env);
		const record: WorkerRecord = {
			id: handle.id,
			pid: handle.pid,
			slot,
			handle,
			startedAt: this.clock.now(),
			startReason,
			stderr: new LastLines(),
			state: {name: 'starting', role, attached: false},
			report: undefined,
			health: undefined,
			covered: new Set(),
			hooksFailed: [],
			warmup: {name: 'none'},
		};
		this.records.set(record.id, record);
		this.forwardOutput(record);
		this.options.logger.info({worker: record.id, workerPid: record.pid, slot, reason: startReason, ...(role === 'member' ? {} : {workerRole: role})}, 'worker started');
		this.follow(record);
		this.emit('forked', record);
		return record;
	}

	send(record: WorkerRecord, message: ToWorker): void {
		if (record.handle.isConnected()) {
			// A worker can disconnect between the check and the send; the error
			// arrives asynchronously and is not ours to report (its exit is).
			record.handle.send(envelope(message), () => {});
		}
	}

	/**
	 * SIGKILL to the process itself: `worker.kill()` disconnects first and never
	 * stops a worker whose event loop is blocked (nodejs/node#22703).
	 */
	kill(record: WorkerRecord, reason: KillReason): void {
		const {state} = record;
		if (state.name === 'gone') {
			return;
		}

		if (state.name !== 'killed') {
			record.state = {name: 'killed', reason, before: state};
			this.emit('killed', record);
		}

		record.handle.kill('SIGKILL');
	}

	/** node:cluster in the worker then closes its servers, and the process exits once their connections end. */
	disconnect(record: WorkerRecord): void {
		if (record.handle.isConnected()) {
			record.handle.disconnect();
		}
	}

	/** A reload's replacement is ready (it listens; one that serves nothing, it runs): it is one of the N now. */
	promote(record: WorkerRecord): void {
		if (record.state.name === 'listening' || record.state.name === 'starting') {
			record.state = {...record.state, role: 'member'};
		}
	}

	/**
	 * A worker with a drained server leaves on its own after the linger; one
	 * with nothing to drain stops listening at once and is disconnected after
	 * the same linger. One that never listened has nothing to linger for.
	 */
	retire(record: WorkerRecord, lingerMs: number, reason: RetireReason = 'reload', by?: NodeJS.Signals): void {
		const {state} = record;
		if (state.name !== 'starting' && state.name !== 'listening') {
			return;
		}

		record.state = {name: 'retiring', attached: state.attached, reason, addresses: state.name === 'listening' ? state.addresses : []};
		// Also to a worker with nothing to drain: its bootstrap runs the app's own
		// listeners for the signal (worker/bootstrap.ts).
		this.send(record, {type: 'retire', lingerMs, ...(by ? {signal: by} : {}), ...(reason === 'start-failed' ? {notReady: true} : {})});
		if (!state.attached) {
			if (state.name === 'listening' && reason !== 'start-failed') {
				this.timers.timeout(() => {
					this.disconnect(record);
				}, lingerMs);
			} else {
				this.disconnect(record);
			}
		}
	}

	/** Resolves true once the worker listens, false if it is gone first. */
	async started(record: WorkerRecord): Promise<boolean> {
		if (record.state.name === 'starting') {
			await pEvent(this, ['listening', 'gone'], {filter: (other: unknown) => other === record, rejectionEvents: []});
		}

		return record.state.name === 'listening';
	}

	/**
	 * Readiness for a worker that serves nothing (`--listen-timeout 0`): its
	 * first heartbeat says its app has loaded and its event loop turns.
	 */
	async running(record: WorkerRecord): Promise<boolean> {
		while (record.health === undefined && isPlaced(record.state)) {
			// eslint-disable-next-line no-await-in-loop -- waits for the worker's next event, then looks again
			await pEvent(this, ['message', 'gone'], {filter: (other: unknown) => other === record, rejectionEvents: []});
		}

		return record.health !== undefined && isPlaced(record.state);
	}

	/** True once a replacement listens on every one of the old worker's `addresses` and is warm; false if it stops first. */
	async ready(record: WorkerRecord, addresses: readonly string[]): Promise<boolean> {
		for (;;) {
			const {state} = record;
			if (state.name !== 'starting' && state.name !== 'listening') {
				return false;
			}

			if (state.name === 'listening' && addresses.every(address => state.addresses.includes(address)) && record.warmup.name !== 'warming') {
				return true;
			}

			// eslint-disable-next-line no-await-in-loop -- waits for the worker's next event, then looks again
			await pEvent(this, ['address', 'message', 'gone', 'killed'], {filter: (other: unknown) => other === record, rejectionEvents: []});
		}
	}

	/** The cluster has stopped: nothing of the fleet's may fire any more. */
	close(): void {
		this.timers.clearAll();
	}

	/**
	 * Once every worker's output has ended, so its last lines reach the log
	 * before the primary exits; or after `timeoutMs`, in case a process the app
	 * started still holds a pipe.
	 */
	async outputFlushed(timeoutMs: number): Promise<void> {
		await withTimeout(Promise.all(this.pendingOutput), timeoutMs, () => [], this.clock);
	}

	private forwardOutput(record: WorkerRecord): void {
		const {stdout, stderr} = record.handle;
		const output = Promise.all([
			stdout ? new LineForwarder(this.options.stdout, {workerPid: record.handle.pid}).attach(stdout) : undefined,
			stderr ? new LineForwarder(this.options.stderr, {workerPid: record.handle.pid, onLine: record.stderr.add}).attach(stderr) : undefined,
		]).then(() => {
			this.pendingOutput.delete(output);
		});
		this.pendingOutput.add(output);
	}

	private follow(record: WorkerRecord): void {
		const {handle} = record;
		let exit: {code: number | null; signal: string | null} | undefined;
		let channelClosed = false;
		let net: ReturnType<Clock['setTimeout']> | undefined;
		const gone = (): void => {
			if (!exit || record.state.name === 'gone') {
				return;
			}

			this.clock.clear(net);
			record.state = {name: 'gone', code: exit.code, signal: exit.signal, last: record.state};
			this.records.delete(record.id);
			this.emit('gone', record);
		};

		handle.on('listening', (address: Address) => {
			this.listened(record, formatAddress(address));
		});
		handle.on('message', (raw: unknown) => {
			this.onMessage(record, raw);
		});
		// Errors on the IPC channel (EPIPE while the worker dies) come before its
		// 'exit'; the exit is what we report.
		handle.on('error', (error: Error) => {
			this.options.logger.debug({worker: record.id, err: error}, 'worker channel error');
		});
		handle.on('disconnect', () => {
			channelClosed = true;
			gone();
		});
		handle.on('exit', (code: number | null, signal: NodeJS.Signals | null) => {
			exit = {code, signal};
			if (channelClosed || !handle.isConnected()) {
				gone();
			} else {
				net = this.clock.setTimeout(gone, CHANNEL_CLOSE_WAIT_MS);
			}
		});
	}

	/** node:cluster's 'listening', or the worker's `listening-apart`. */
	private listened(record: WorkerRecord, where: string): void {
		const {state} = record;
		if (state.name !== 'starting' && state.name !== 'listening') {
			return;
		}

		// The first address makes it listening; another is a second server of the app.
		record.state = state.name === 'listening'
			? {...state, addresses: [...state.addresses, where]}
			: {name: 'listening', role: state.role, attached: state.attached, addresses: [where]};
		this.options.logger.info({worker: record.id, workerPid: record.pid, address: where}, 'worker listening');
		this.timers.timeout(() => {
			this.warnUncovered(record);
		}, COVERAGE_CHECK_MS);
		if (state.name === 'starting') {
			this.emit('listening', record);
		}

		this.emit('address', record);
	}

	private warnUncovered(record: WorkerRecord): void {
		const missing = uncovered(record);
		if (missing.length === 0) {
			this.options.logger.debug({worker: record.id}, 'every address of the worker is drained');
		}

		for (const address of missing) {
			if (!this.warnedUncovered.has(address)) {
				this.warnedUncovered.add(address);
				this.options.logger.warn({worker: record.id, workerPid: record.pid, address}, 'a server graceful-cluster does not drain listens here (not HTTP, left out with exclude(), or --auto-attach off without attach()): nothing counts its requests, and those in flight when the worker exits are cut');
			}
		}
	}

	private onMessage(record: WorkerRecord, raw: unknown): void {
		const parsed = parseMessage<ToPrimary>(raw, TO_PRIMARY);
		switch (parsed.kind) {
			case 'foreign': {
				// The app's own process.send() traffic: not ours, not an error.
				this.options.logger.trace({worker: record.id}, 'ignored an app message');
				return;
			}

			case 'invalid': {
				if (this.invalidLogs++ < MAX_INVALID_LOGS) {
					this.options.logger.warn({worker: record.id, reason: parsed.reason}, 'ignored a malformed graceful-cluster message');
				}

				return;
			}

			case 'ours': {
				const {message} = parsed;
				if (message.type !== 'metrics') {
					(this.handlers[message.type] as (record: WorkerRecord, message: ToPrimary) => void)(record, message);
				}

				this.emit('message', record, message);
				return;
			}

			default: {
				const never: never = parsed;
				throw new Error(`unexpected ${String(never)}`);
			}
		}
	}
}
