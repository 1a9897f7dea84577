/**
 * Recycling: replacing a worker that has grown too big (`--max-memory-restart`,
 * pm2's name) or served enough (`--max-requests` plus a random
 * `0..--max-requests-jitter`, gunicorn's names) the way a reload does, new
 * worker first, so capacity never drops: pm2's memory restart kills
 * mid-request (pm2#5562), and gunicorn's max-requests resets connections
 * (gunicorn#3038). Judged on each heartbeat, only while the cluster runs, and
 * never for two workers of one slot at once.
 *
 *   counting ─over a limit─▶ replacing ─replaced─▶ (it retires; not a member any more)
 *                                │ ─the new worker failed─▶ cooling ─RETRY_AFTER_MS─▶ counting
 */
import type {Clock} from '../clock.js';
import type {Logger} from '../logger.js';
import type {Fleet} from './fleet.js';
import type {ReplaceReason, Replacer} from './reload.js';
import {isServingMember, roleOf, type WorkerRecord} from './worker-record.js';

export interface RecycleOptions {
	/** RSS above which a worker is replaced; 0: off. */
	readonly maxMemoryBytes: number;
	/** Requests after which a worker is replaced (plus its jitter); 0: off. */
	readonly maxRequests: number;
	readonly maxRequestsJitter: number;
}

/**
 * Heartbeats in a row above the memory limit before a replacement: "stays
 * above", not one spike that the next GC takes back.
 */
export const MEMORY_BEATS = 3;
/** After a replacement failed to start, how long before that worker is judged again. */
export const RETRY_AFTER_MS = 30_000;

type Recycle =
	| {readonly name: 'counting'; readonly requestLimit: number; readonly beatsOver: number}
	| {readonly name: 'replacing'; readonly reason: ReplaceReason}
	| {readonly name: 'cooling'; readonly requestLimit: number; readonly until: number};

export const recycleEnabled = (options: RecycleOptions): boolean => options.maxMemoryBytes > 0 || options.maxRequests > 0;

export class Recycler {
	private readonly members = new Map<WorkerRecord, Recycle>();

	constructor(
		private readonly fleet: Fleet,
		private readonly replacer: Replacer,
		private readonly options: RecycleOptions,
		private readonly clock: Clock,
		private readonly logger: Logger,
		/** False while the cluster reloads or drains. */
		private readonly allowed: () => boolean,
		/** 0..1; injected so the jitter is exact in tests. */
		private readonly random: () => number = Math.random,
	) {
		if (!recycleEnabled(options)) {
			return;
		}

		fleet.on('forked', record => {
			this.members.set(record, {name: 'counting', requestLimit: this.requestLimit(), beatsOver: 0});
		});
		fleet.on('gone', record => {
			this.members.delete(record);
		});
		fleet.on('message', (record, message) => {
			if (message.type === 'heartbeat') {
				this.judge(record);
			}
		});
	}

	/** Its request limit, jitter included: each worker draws its own. */
	limitOf(record: WorkerRecord): number | undefined {
		const state = this.members.get(record);
		return state && state.name !== 'replacing' ? state.requestLimit : undefined;
	}

	private requestLimit(): number {
		const {maxRequests, maxRequestsJitter} = this.options;
		return maxRequests === 0 ? 0 : maxRequests + Math.floor(this.random() * (maxRequestsJitter + 1));
	}

	private judge(record: WorkerRecord): void {
		let state = this.members.get(record);
		const health = record.health;
		if (state === undefined || health === undefined || state.name === 'replacing') {
			return;
		}

		if (state.name === 'cooling') {
			if (this.clock.now() < state.until) {
				return;
			}

			state = {name: 'counting', requestLimit: state.requestLimit, beatsOver: 0};
			this.members.set(record, state);
		}

		const {maxMemoryBytes} = this.options;
		const over = maxMemoryBytes > 0 && health.rssBytes > maxMemoryBytes;
		const beatsOver = over ? state.beatsOver + 1 : 0;
		if (beatsOver !== state.beatsOver) {
			state = {...state, beatsOver};
			this.members.set(record, state);
		}

		const reason: ReplaceReason | undefined = beatsOver >= MEMORY_BEATS
			? 'memory'
			: (state.requestLimit > 0 && health.requests >= state.requestLimit ? 'requests' : undefined);
		if (reason === undefined || !this.canReplace(record)) {
			return;
		}

		this.members.set(record, {name: 'replacing', reason});
		const requestLimit = state.requestLimit;
		this.logger.info({
			worker: record.id,
			workerPid: record.pid,
			slot: record.slot,
			reason,
			...(reason === 'memory' ? {rssBytes: health.rssBytes, maxMemoryBytes} : {requests: health.requests, maxRequests: requestLimit}),
		}, 'recycling worker: a new one starts, then this one retires');
		void this.replacer.replace(record, reason).then(result => {
			if (result.kind === 'failed') {
				const {candidate, failingChecks} = result;
				this.logger.error({
					worker: record.id,
					reason,
					newWorker: candidate.id,
					...(failingChecks && failingChecks.length > 0 ? {failingChecks} : {}),
					stderr: candidate.stderr.text,
				}, 'recycling failed: the new worker did not start or was not ready in time; the old one keeps serving');
			}

			if (result.kind !== 'replaced' && this.members.has(record)) {
				this.members.set(record, {name: 'cooling', requestLimit, until: this.clock.now() + RETRY_AFTER_MS});
			}
		});
	}

	private canReplace(record: WorkerRecord): boolean {
		return this.allowed()
			&& isServingMember(record)
			&& !this.replacer.replacing(record.slot)
			&& !this.fleet.alive.some(other => other !== record && other.slot === record.slot && roleOf(other.state) !== 'member');
	}
}
