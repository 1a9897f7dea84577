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
import type {IntervalHistogram} from 'node:perf_hooks';
import type {Logger} from '../logger.js';
import {readWorkerEnv, type HeartbeatOptions} from '../worker-env.js';
import type {WorkerChannel} from './channel.js';

export type {HeartbeatOptions} from '../worker-env.js';

export const HEARTBEAT_INTERVAL_MS = 1000;

/**
 * When the watchdog thread captures: most of the timeout, leaving the capture
 * (about 30 ms) and the line's trip to the primary time before the kill.
 */
export const captureAfter = (workerTimeoutMs: number): number => workerTimeoutMs - Math.min(2000, workerTimeoutMs / 2);

/** The settings the primary passed in the worker's environment at fork (worker-env.ts). */
export const heartbeatOptionsFromEnv = (env: Record<string, string | undefined>): HeartbeatOptions => readWorkerEnv(env).heartbeat;

export function startHeartbeat(channel: WorkerChannel, logger: Logger, options: HeartbeatOptions): void {
	// Made at the first beat: perf_hooks costs about 1.5 ms, and every start,
	// restart and reload waits for the worker's. So the first beat, a second in,
	// reports a delay of 0, as a histogram without a sample does; each beat after
	// it, the worst delay since the one before.
	let delay: IntervalHistogram | undefined;
	const beat = options.captureStack && options.workerTimeoutMs > 0 ? startWatchdogThread(options.workerTimeoutMs, channel.workerId, logger) : undefined;
	setInterval(() => {
		const {rss, heapUsed} = process.memoryUsage();
		const stats = channel.stats?.();
		// The histogram's max in nanoseconds; 0 before its first sample.
		const loopDelayMs = delay === undefined ? 0 : Math.round(delay.max / 1e6);
		delay ??= startDelayHistogram();
		delay.reset();
		if (beat) {
			Atomics.add(beat, 0, 1);
		}

		channel.send({
			type: 'heartbeat',
			rssBytes: rss,
			heapUsedBytes: heapUsed,
			loopDelayMs,
			requests: stats?.requests ?? 0,
			inflight: stats?.inflight ?? 0,
		});
	}, HEARTBEAT_INTERVAL_MS).unref();
}

function startDelayHistogram(): IntervalHistogram {
	// The resolution is the histogram's sampling period, not the precision of a
	// blocked loop's delay (that shows whole, in the first sample after it).
	const histogram = process.getBuiltinModule('node:perf_hooks').monitorEventLoopDelay({resolution: 20});
	histogram.enable();
	return histogram;
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
