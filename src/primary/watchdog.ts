/**
 * Hung workers: a worker whose event loop has been silent for `--worker-timeout`
 * is killed and replaced by the supervisor's normal restart. The silence is
 * measured from its heartbeat, sent once a second from its main loop: a
 * blocked loop stops it, a busy one that yields does not. Until a worker
 * listens, `--listen-timeout` is its timeout instead (gunicorn's single
 * timeout for both is a long-standing complaint, gunicorn#2196). During a
 * drain the watchdog keeps watching: a hung worker cannot finish anything.
 *
 * If the primary's own check runs far late (its loop was blocked, or the host
 * was suspended), every worker's count starts over: the silence was ours, not
 * theirs (Unicorn skips the round after a suspend).
 */
import type {TimerGroup} from '../clock.js';
import type {Logger} from '../logger.js';
import {HUNG_STACK_MESSAGE} from '../protocol.js';
import type {Fleet} from './fleet.js';
import type {WorkerRecord} from './worker-record.js';

/** How often the primary looks; the silence it sees is at most this much late. */
export const WATCHDOG_CHECK_MS = 1000;

type Watch =
	| {readonly name: 'watching'; readonly since: number}
	| {readonly name: 'killed'; readonly silentMs: number};

export interface WatchdogOptions {
	/** 0: off. */
	readonly workerTimeoutMs: number;
}

export class Watchdog {
	private readonly watched = new Map<WorkerRecord, Watch>();
	private lastCheck: number | undefined;

	constructor(private readonly fleet: Fleet, private readonly options: WatchdogOptions, private readonly timers: TimerGroup, private readonly logger: Logger) {
		if (options.workerTimeoutMs === 0) {
			return;
		}

		fleet.on('listening', record => {
			this.watched.set(record, {name: 'watching', since: this.timers.clock.now()});
		});
		fleet.on('gone', record => {
			this.watched.delete(record);
		});
	}

	start(): void {
		if (this.options.workerTimeoutMs === 0) {
			return;
		}

		this.lastCheck = this.timers.clock.now();
		this.timers.interval(() => {
			this.check();
		}, WATCHDOG_CHECK_MS);
	}

	/** What the watchdog thinks of a worker: for tests and metrics. */
	stateOf(record: WorkerRecord): Watch | undefined {
		return this.watched.get(record);
	}

	private check(): void {
		const now = this.timers.clock.now();
		const late = now - (this.lastCheck ?? now) - WATCHDOG_CHECK_MS;
		this.lastCheck = now;
		const ourPause = late > this.options.workerTimeoutMs / 2;
		if (ourPause) {
			this.logger.warn({lateMs: Math.round(late)}, 'the primary\'s own event loop was stalled; the watchdog starts its count over');
		}

		for (const [record, watch] of this.watched) {
			if (watch.name !== 'watching') {
				continue;
			}

			if (ourPause) {
				this.watched.set(record, {name: 'watching', since: now});
				continue;
			}

			if (!record.handle.isConnected()) {
				// Disconnected: it can no longer beat, and the drain's or the retire's
				// deadline is its timeout now.
				continue;
			}

			const lastSign = Math.max(watch.since, record.health?.at ?? 0);
			const silentMs = now - lastSign;
			if (silentMs >= this.options.workerTimeoutMs && record.state.name !== 'killed' && record.state.name !== 'gone') {
				this.kill(record, Math.round(silentMs));
			}
		}
	}

	private kill(record: WorkerRecord, silentMs: number): void {
		this.watched.set(record, {name: 'killed', silentMs});
		const hung = findStack(record.stderr.text);
		this.logger.error({
			worker: record.id,
			workerPid: record.pid,
			slot: record.slot,
			silentMs,
			workerTimeoutMs: this.options.workerTimeoutMs,
			state: record.state.name,
			inflight: record.health?.inflight ?? record.report?.inflight ?? null,
			loopDelayMs: record.health?.loopDelayMs ?? null,
			stack: hung?.stack ?? null,
			...(hung ? {} : {stackMissing: 'no capture: run with --hung-stack on, or the process was stopped (SIGSTOP) and could not capture'}),
		}, 'worker hung: its event loop was silent longer than --worker-timeout; killing it');
		this.fleet.kill(record, 'hung');
	}
}

/** The stack the worker's capture thread wrote to stderr, if it did (worker/watchdog-thread.ts). */
export function findStack(lines: readonly string[]): {readonly stack: readonly string[]} | undefined {
	for (let index = lines.length - 1; index >= 0; index--) {
		const line = lines[index]!;
		if (!line.includes(HUNG_STACK_MESSAGE)) {
			continue;
		}

		try {
			const parsed = JSON.parse(line) as {msg?: unknown; stack?: unknown};
			if (parsed.msg === HUNG_STACK_MESSAGE && Array.isArray(parsed.stack)) {
				return {stack: parsed.stack.map(String)};
			}
		} catch {}
	}

	return undefined;
}
