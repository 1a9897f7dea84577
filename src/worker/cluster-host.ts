/**
 * The drain's host under the CLI, in a worker with a server to drain: the
 * primary's drain or retire message starts the drain, the counts go back as
 * reports, and the worker exits once the primary has its `drained` message.
 */
import cluster from 'node:cluster';
import {systemClock} from '../clock.js';
import {tallyOf, type Counts} from '../counts.js';
import type {Logger} from '../logger.js';
import type {InflightMessage} from '../protocol.js';
import {workerSettingsFromEnv} from '../settings.js';
import {LISTEN_SETTLE_MS, remaining} from '../timeline.js';
import {readWorkerEnv} from '../worker-env.js';
import {Attachments} from './attach.js';
import {leaveSignal, type ReceivedDrain, type WorkerChannel} from './channel.js';
import {ProcessDrain} from './drain.js';
import {sendFinalMetrics} from './metrics.js';
import {appExitCode, clearCodeSetBefore, ExitWatch} from './app-exit.js';
import {appShutdown} from './app-shutdown.js';
import {getSignalListeners} from './signal-listeners.js';
import {flushOutput} from './stdio.js';
import {Warmup} from './warmup.js';

/**
 * The process's drain, made with its first server: the bootstrap's, or, under
 * an older bootstrap that takes none, the helper's. `stopOthers`: the servers
 * it does not take stop listening, as the drained ones do.
 */
export function hostCluster(channel: WorkerChannel, logger: Logger, stopOthers?: () => void): Attachments {
	const settings = workerSettingsFromEnv(process.env);
	const {replacement, peerRates, listenTimeoutMs} = readWorkerEnv(process.env);
	const drain = new ProcessDrain(settings, logger, systemClock, {peerRates});
	let warmup: Warmup | undefined;
	if (replacement) {
		const started = new Warmup(message => {
			channel.send(message);
		}, logger);
		channel.serveNow = () => {
			started.serveNow();
		};
		warmup = started;
	}

	joinCluster(drain, channel, logger, {warmup, stopOthers, listenTimeoutMs});
	return new Attachments(drain, {
		channel,
		warmup,
		checkTimeoutMs: settings.checkTimeoutMs,
		uncovers(address) {
			channel.send({type: 'covers', address, drained: false});
		},
	});
}

interface JoinOptions {
	/** This worker replaces another, and takes connections once ready (warmup.ts). */
	readonly warmup: Warmup | undefined;
	/** The servers the drain does not take stop listening (`hostCluster`). */
	readonly stopOthers: (() => void) | undefined;
	/** `--listen-timeout`: how long a drain waits for an app still starting to listen. */
	readonly listenTimeoutMs: number;
}

function joinCluster(drain: ProcessDrain, channel: WorkerChannel, logger: Logger, {warmup, stopOthers, listenTimeoutMs}: JoinOptions): void {
	// The bootstrap holds the app's signal listeners; they run after our hooks now.
	const held = getSignalListeners();
	if (held) {
		held.owner = 'attach';
		drain.setAppShutdown(appShutdown(held, logger));
	}

	/** The drain's counts as they stand, to the primary; `extra`: what this report is besides. */
	const report = (counts: Counts, extra: Pick<InflightMessage, 'atSignal' | 'hooksFailed' | 'reportId'> = {}): void => {
		const arrivals = drain.arrivals.report();
		channel.send({type: 'inflight', ...counts, ...(arrivals ? {arrivals} : {}), ...extra});
	};

	drain.setHost({
		progress(counts) {
			report(counts);
		},
		signalledWhileRetiring(counts) {
			// The drain's starting point for this worker: sent at once, ahead of anything it tells later.
			report(counts, {atSignal: true, hooksFailed: drain.summary().hooksFailed});
		},
		covers(address) {
			channel.send({type: 'covers', address});
		},
		stoppedAccepting: stopOthers,
		notice(code) {
			channel.send({type: 'notice', code});
		},
		hooksStarting(counts, proceed) {
			const arrivals = drain.arrivals.report();
			// Acknowledged before the first hook: a hook's process.exit() cannot
			// overtake it, so the primary knows no request was lost.
			// The app's metrics go first: a hook's process.exit() must not lose them.
			void sendFinalMetrics(channel).then(() => {
				channel.send({type: 'hooks', ...tallyOf(counts), ...(arrivals ? {arrivals} : {})}, proceed);
			});
		},
		async hookFailed(hook) {
			await new Promise<void>(resolve => {
				channel.send({type: 'hook-failed', hook: hook.slice(0, 4096)}, resolve);
			});
		},
		finish(summary, exit) {
			clearCodeSetBefore(codeAtDrain, logger);
			void flushOutput().then(async () => sendFinalMetrics(channel)).then(() => {
				logger.info({...summary, exitCode: appExitCode() ?? 0}, 'worker drained');
				// Exit only once the primary has the message: it tells a drained worker
				// from one that crashed by this message alone.
				const arrivals = drain.arrivals.report();
				channel.send({type: 'drained', ...summary, ...(arrivals ? {arrivals} : {})}, () => {
					if (exit === 'now') {
						// With the code the app set, if any, as plain Node would: a failing
						// one is its shutdown's failure, which the primary counts.
						process.exit();
					}

					// The app's shutdown left nothing running: the process ends by itself,
					// after whatever its 'beforeExit' listeners started; a failing code they set is named.
					new ExitWatch(logger).blame('the app\'s beforeExit or exit listeners');
					process.channel?.unref();
				});
			});
		},
	});
	process.on('exit', () => {
		drain.exiting();
	});
	channel.stats = () => ({requests: drain.requests, inflight: drain.inflight});
	channel.endReject = () => {
		drain.endReject();
	};
	channel.reportNow = id => {
		report(drain.counts, {reportId: id});
	};
	channel.drainWhileRetiring = ({message, receivedAt}) => {
		if (message.type === 'drain') {
			drain.drainWhileRetiring(remaining(message, performance.now() - receivedAt), message.signalAt);
		}
	};
	channel.send({type: 'attached', ...(warmup ? {warming: true} : {})});
	/** The app's exit code when the drain or retire began (app-exit.ts `clearCodeSetBefore`). */
	let codeAtDrain: number | undefined;
	const start = ({message, receivedAt}: ReceivedDrain): void => {
		codeAtDrain = appExitCode();
		warmup?.stop();
		// Not listening yet (node:cluster's `worker.state`, not in its types): the
		// app is still starting. A drain waits for its listen until the primary
		// would count it failed, leaving half the time to the deadline; a retire, a moment.
		const starting = (cluster.worker as {state?: string} | undefined)?.state !== 'listening';
		if (message.type === 'drain') {
			// The message's timeline counts from when the bootstrap read it.
			const timeline = remaining(message, performance.now() - receivedAt);
			if (starting) {
				drain.settle(Math.max(LISTEN_SETTLE_MS, Math.min(listenTimeoutMs - process.uptime() * 1000, timeline.gracePeriodMs / 2)));
			}

			drain.begin(timeline, leaveSignal(message, held?.received), message.signalAt);
		} else {
			if (starting) {
				drain.settle(LISTEN_SETTLE_MS);
			}

			drain.retire(message.lingerMs, leaveSignal(message, undefined), message.notReady === true);
		}
	};

	if (channel.drain) {
		start(channel.drain);
	} else {
		channel.listeners.add(start);
	}
}
