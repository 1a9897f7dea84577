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

/** Under an older bootstrap that takes no server, the helper makes the drain. `stopOthers`: the servers it does not take stop listening as the drained ones do. */
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

	joinCluster(drain, channel, logger, {warmup, stopOthers, listenTimeoutMs, shedding: settings.maxEventLoopDelayMs > 0});
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
	readonly warmup: Warmup | undefined;
	readonly stopOthers: (() => void) | undefined;
	readonly listenTimeoutMs: number;
	/** `--max-event-loop-delay` is on. */
	readonly shedding: boolean;
}

function joinCluster(drain: ProcessDrain, channel: WorkerChannel, logger: Logger, {warmup, stopOthers, listenTimeoutMs, shedding}: JoinOptions): void {
	// The bootstrap holds the app's signal listeners; they run after our hooks now.
	const held = getSignalListeners();
	if (held) {
		held.owner = 'attach';
		drain.setAppShutdown(appShutdown(held, logger));
	}

	const report = (counts: Counts, extra: Pick<InflightMessage, 'atSignal' | 'hooksFailed' | 'reportId'> = {}): void => {
		const arrivals = drain.arrivals.report();
		channel.send({type: 'inflight', ...counts, ...(arrivals ? {arrivals} : {}), ...extra});
	};

	drain.setHost({
		progress(counts) {
			report(counts);
		},
		signalledWhileRetiring(counts) {
			// The drain's starting point for this worker: sent ahead of anything it tells later.
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
			// The metrics, then this message, acknowledged before the first hook: a hook's
			// process.exit() cannot lose them, and the primary knows no request was lost.
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
				// Exit only once the primary has the message: it tells a drained worker from a
				// crashed one by this message alone.
				const arrivals = drain.arrivals.report();
				channel.send({type: 'drained', ...summary, ...(arrivals ? {arrivals} : {})}, () => {
					if (exit === 'now') {
						// With the code the app set, if any, as plain Node would.
						process.exit();
					}

					// The process ends by itself, after what its 'beforeExit' listeners started.
					new ExitWatch(logger).blame('the app\'s beforeExit or exit listeners');
					process.channel?.unref();
				});
			});
		},
	});
	process.on('exit', () => {
		drain.exiting();
	});
	channel.stats = () => ({requests: drain.requests, inflight: drain.inflight, connectionsAged: drain.connectionsAged, ...drain.sheddingStats});
	if (shedding) {
		channel.loopSample = lateMs => {
			drain.loopSample(lateMs);
		};
		channel.everyWorkerSheds = all => {
			drain.everyWorkerSheds = all;
		};
	}

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
	let codeAtDrain: number | undefined;
	const start = ({message, receivedAt}: ReceivedDrain): void => {
		codeAtDrain = appExitCode();
		warmup?.stop();
		// Not listening yet (`worker.state`, not in node:cluster's types): the app is still
		// starting. A drain waits for its listen until the primary would count it failed,
		// leaving half the time to the deadline; a retire, a moment.
		const starting = (cluster.worker as {state?: string} | undefined)?.state !== 'listening';
		if (message.type === 'drain') {
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
