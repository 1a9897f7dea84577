/**
 * The worker's heartbeat, started by the bootstrap in every worker (with or
 * without `attach()`): once a second, from a timer on the main event loop, a
 * `heartbeat` message to the primary with the loop's delay, memory and request
 * counts. A blocked loop stops it, and that silence is how the primary finds a
 * hung worker (primary/watchdog.ts). A worker thread's heartbeat would keep
 * beating through a `while (true)` (Puma's is a thread and so cannot tell).
 *
 * Nothing here runs per request: the counts are read from `channel.stats`,
 * which `attach()` sets, once a second.
 *
 * Optionally (`--hung-stack on`) a watchdog thread (watchdog-thread.ts) watches
 * the same beat through shared memory and, when the main loop has been silent
 * for most of the timeout, captures its JavaScript stack through the inspector
 * before the primary kills the process: `--report-on-signal` does not fire
 * while the loop is blocked (RESEARCH-2.md section 4b).
 */
import {systemClock} from '../clock.js';
import type {Logger} from '../logger.js';
import {HEARTBEAT_INTERVAL_MS, LOOP_SAMPLE_MS} from '../protocol.js';
import {readWorkerEnv, type HeartbeatOptions} from '../worker-env.js';
import type {WorkerChannel} from './channel.js';

export type {HeartbeatOptions} from '../worker-env.js';

/**
 * When the watchdog thread captures: most of the timeout, leaving the capture
 * (about 30 ms) and the line's trip to the primary time before the kill.
 */
export const captureAfter = (workerTimeoutMs: number): number => workerTimeoutMs - Math.min(2000, workerTimeoutMs / 2);

/** The settings the primary passed in the worker's environment at fork (worker-env.ts). */
export const heartbeatOptionsFromEnv = (env: Record<string, string | undefined>): HeartbeatOptions => readWorkerEnv(env).heartbeat;

/**
 * The worst event-loop delay between two beats, from a timer's lateness: how
 * much later than its period each tick came. Unlike a histogram's `reset()`,
 * taking the worst keeps the last tick's time, so a stall that begins right
 * after a beat is measured too; and a delay is the lateness alone, 0 at rest,
 * not the period plus it.
 */
export class LoopDelay {
	private last: number;
	private worst = 0;

	constructor(now: number, private readonly periodMs = LOOP_SAMPLE_MS) {
		this.last = now;
	}

	/** The sampling timer fired at `now` (ms). */
	tick(now: number): void {
		const late = now - this.last - this.periodMs;
		if (late > this.worst) {
			this.worst = late;
		}

		this.last = now;
	}

	/** The worst delay since the last take, in whole ms; the next period starts from the last tick. */
	take(): number {
		const worst = Math.round(this.worst);
		this.worst = 0;
		return worst;
	}
}

export function startHeartbeat(channel: WorkerChannel, logger: Logger, options: HeartbeatOptions): void {
	const beat = options.captureStack && options.workerTimeoutMs > 0 ? startWatchdogThread(options.workerTimeoutMs, channel.workerId, logger) : undefined;
	// One timer for both: the samples, and a beat at the first sample a second
	// or more after the last one (at once after a stall). The first beat, a
	// second in, reports a delay of 0: loading the app is not a stall.
	const startedAt = systemClock.now();
	const delay = new LoopDelay(startedAt);
	let lastBeat = startedAt;
	let first = true;
	setInterval(() => {
		const now = systemClock.now();
		delay.tick(now);
		// Half a sample early rather than one late: a timer fires a little
		// after its period, never before it.
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
			requests: stats?.requests ?? 0,
			inflight: stats?.inflight ?? 0,
		});
		first = false;
	}, LOOP_SAMPLE_MS).unref();
}

function startWatchdogThread(workerTimeoutMs: number, workerId: number, logger: Logger): Int32Array | undefined {
	// Under a debugger the loop stops at every breakpoint; a capture would pause
	// it again and a second session would fight the developer's.
	// Loaded here, not at the top: only `--hung-stack on` needs them, and the
	// bootstrap runs before every worker's first line.
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
			// It holds a few closures and one stack: a small heap caps its memory.
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
