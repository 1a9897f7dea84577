/**
 * Once a second, from a timer on the main event loop, a `heartbeat` message to the
 * primary with the loop's delay, memory and request counts. A blocked loop stops it,
 * and that silence is how the primary finds a hung worker (primary/watchdog.ts): a
 * worker thread's heartbeat would keep beating through a `while (true)`.
 *
 * With `--hung-stack on` a watchdog thread (watchdog-thread.ts) watches the same beat
 * through shared memory and captures the main thread's stack through the inspector
 * before the primary kills it: `--report-on-signal` writes its report from a
 * `process.on(signal)` listener (nodejs/node lib/internal/process/report.js), which a
 * blocked loop never runs.
 */
import {systemClock} from '../clock.js';
import type {Logger} from '../logger.js';
import {HEARTBEAT_INTERVAL_MS, LOOP_SAMPLE_MS} from '../protocol.js';
import {readWorkerEnv, type HeartbeatOptions} from '../worker-env.js';
import type {WorkerChannel} from './channel.js';

export type {HeartbeatOptions} from '../worker-env.js';

/** Leaves the capture (about 30 ms) and the line's trip to the primary time before the kill. */
export const captureAfter = (workerTimeoutMs: number): number => workerTimeoutMs - Math.min(2000, workerTimeoutMs / 2);

export const heartbeatOptionsFromEnv = (env: Record<string, string | undefined>): HeartbeatOptions => readWorkerEnv(env).heartbeat;

/**
 * The worst event-loop delay between two beats, from a timer's lateness. Unlike a
 * histogram's `reset()`, taking the worst keeps the last tick's time, so a stall that
 * begins right after a beat is measured too; a delay is 0 at rest, not the period.
 */
export class LoopDelay {
	private last: number;
	private worst = 0;

	constructor(now: number, private readonly periodMs = LOOP_SAMPLE_MS) {
		this.last = now;
	}

	/** This sample's lateness, in ms (negative when early). */
	tick(now: number): number {
		const late = now - this.last - this.periodMs;
		if (late > this.worst) {
			this.worst = late;
		}

		this.last = now;
		return late;
	}

	/** In whole ms; the next period starts from the last tick. */
	take(): number {
		const worst = Math.round(this.worst);
		this.worst = 0;
		return worst;
	}
}

export function startHeartbeat(channel: WorkerChannel, logger: Logger, options: HeartbeatOptions): void {
	const beat = options.captureStack && options.workerTimeoutMs > 0 ? startWatchdogThread(options.workerTimeoutMs, channel.workerId, logger) : undefined;
	// One timer for both the samples and the beat. The first beat reports a delay of 0:
	// loading the app is not a stall.
	const startedAt = systemClock.now();
	const delay = new LoopDelay(startedAt);
	let lastBeat = startedAt;
	let first = true;
	setInterval(() => {
		const now = systemClock.now();
		const late = delay.tick(now);
		// `--max-event-loop-delay` (the drain sets it): shedding is decided on every sample.
		channel.loopSample?.(late);
		// Half a sample early rather than one late: a timer fires a little after its period, never before.
		if (now - lastBeat < HEARTBEAT_INTERVAL_MS - (LOOP_SAMPLE_MS / 2)) {
			return;
		}

		lastBeat = now;
		const {rss, heapUsed} = process.memoryUsage();
		const stats = channel.stats?.();
		const loopDelayMs = delay.take();
		if (beat) {
			Atomics.add(beat, 0, 1);
		}

		channel.send({
			type: 'heartbeat',
			rssBytes: rss,
			heapUsedBytes: heapUsed,
			loopDelayMs: first ? 0 : loopDelayMs,
			requests: 0,
			inflight: 0,
			...stats,
		});
		first = false;
	}, LOOP_SAMPLE_MS).unref();
}

function startWatchdogThread(workerTimeoutMs: number, workerId: number, logger: Logger): Int32Array | undefined {
	// Under a debugger the loop stops at every breakpoint; a capture would pause it again
	// and a second session would fight the developer's. Loaded lazily: the bootstrap runs
	// before every worker's first line.
	const {url} = process.getBuiltinModule('node:inspector');
	const {Worker} = process.getBuiltinModule('node:worker_threads');
	if (url() !== undefined) {
		logger.info('a debugger is attached: no stack capture for a blocked event loop');
		return undefined;
	}

	const beat = new Int32Array(new SharedArrayBuffer(4));
	try {
		const thread = new Worker(new URL('watchdog-thread.js', import.meta.url), {
			workerData: {beat, captureAfterMs: captureAfter(workerTimeoutMs), workerId, pid: process.pid},
			resourceLimits: {maxOldGenerationSizeMb: 8, maxYoungGenerationSizeMb: 1},
			stdout: false,
			stderr: false,
		});
		thread.unref();
		thread.on('error', error => {
			logger.warn({err: error}, 'the stack-capture thread failed; hung workers are still killed, without their stack');
		});
	} catch (error) {
		logger.warn({err: error}, 'could not start the stack-capture thread');
		return undefined;
	}

	return beat;
}
