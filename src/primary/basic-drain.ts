/**
 * The basic drain, for workers with nothing to drain (a raw `net` protocol, a
 * queue consumer, `--auto-attach off` without attach()): disconnected at the
 * end of the reject phase (node:cluster then closes their servers), killed at
 * the deadline. One still starting then is disconnected once it listens, within
 * `--listen-timeout` of its start: node:cluster never lets a disconnected
 * worker listen, and an app that sets up its shutdown once listening would
 * never have one. With `--listen-timeout 0`, one that never listened has
 * nothing to reject and is disconnected at the signal, so its shutdown starts
 * then.
 */
import type {Clock, TimerGroup} from '../clock.js';
import type {Logger} from '../logger.js';
import {LISTEN_SETTLE_MS} from '../timeline.js';
import type {Fleet} from './fleet.js';
import {isAttached, type WorkerRecord} from './worker-record.js';

export interface BasicDrainOptions {
	readonly fleet: Fleet;
	readonly clock: Clock;
	readonly logger: Logger;
	/** The drain's timers: cleared with it. */
	readonly timers: TimerGroup;
	/** `--listen-timeout`: how long a worker still starting at the reject phase's end is waited for; 0, not at all. */
	readonly listenTimeoutMs?: number | undefined;
}

export class BasicDrain {
	/** Still starting when the reject phase ended: disconnected once they listen. */
	private readonly disconnectOnListen = new Set<WorkerRecord>();

	constructor(private readonly options: BasicDrainOptions) {}

	disconnectServerless(): void {
		if ((this.options.listenTimeoutMs ?? 0) > 0) {
			return;
		}

		for (const record of this.options.fleet.alive) {
			if (record.state.name === 'starting' && !isAttached(record.state) && record.handle.isConnected()) {
				this.options.logger.info({worker: record.id, workerPid: record.pid}, 'a worker that serves nothing (it never listened): its shutdown starts now');
				record.leftForBasicDrain = true;
				this.options.fleet.disconnect(record);
			}
		}
	}

	disconnectAll(): void {
		const {fleet, clock, logger, timers, listenTimeoutMs = 0} = this.options;
		for (const record of fleet.alive) {
			if (isAttached(record.state) || !record.handle.isConnected() || this.disconnectOnListen.has(record)) {
				continue;
			}

			const waitMs = record.startedAt + listenTimeoutMs - clock.now();
			if (record.state.name === 'starting' && listenTimeoutMs > 0 && waitMs > 0) {
				logger.info({worker: record.id, workerPid: record.pid, waitMs: Math.round(waitMs)}, 'a worker that did not attach graceful-cluster is still starting; disconnecting it once it listens');
				this.disconnectOnListen.add(record);
				timers.timeout(() => {
					this.disconnect(record);
				}, waitMs);
				continue;
			}

			this.disconnect(record);
		}
	}

	/** Its first server listens: the disconnect waits LISTEN_SETTLE_MS more, for the app's other servers. */
	readonly onListening = (record: WorkerRecord): void => {
		if (this.disconnectOnListen.has(record)) {
			this.options.timers.timeout(() => {
				this.disconnect(record);
			}, LISTEN_SETTLE_MS);
		}
	};

	private disconnect(record: WorkerRecord): void {
		this.disconnectOnListen.delete(record);
		if (!isAttached(record.state) && record.handle.isConnected()) {
			this.options.logger.info({worker: record.id, workerPid: record.pid, state: record.state.name}, 'disconnecting a worker that did not attach graceful-cluster');
			record.leftForBasicDrain = true;
			this.options.fleet.disconnect(record);
		}
	}
}
