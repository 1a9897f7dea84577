/**
 * The drain's host when the app runs alone (`node server.js`: a laptop, a
 * test): no primary, so this process takes the signal itself, keeps its own
 * deadline and exits with the CLI's codes (0, 3 at the deadline, 4 on a second
 * signal), on the timeline read from `GRACEFUL_CLUSTER_*`.
 */
import {performance} from 'node:perf_hooks';
import {ExitCode} from '../exit-codes.js';
import type {Logger} from '../logger.js';
import {isDuplicateSignal, type Timeline} from '../timeline.js';
import type {ProcessDrain} from './drain.js';
import {asHooks, holdSignalListeners} from './signal-listeners.js';
import {blockOutput, flushOutput} from './stdio.js';

/** At most one `drain progress` line a second: the drain reports four times as often. */
const PROGRESS_LOG_MS = 1000;

export function runStandalone(drain: ProcessDrain, logger: Logger, timeline: Timeline): void {
	// The app's SIGTERM/SIGINT listeners, those already there and those to come,
	// run as the last hooks instead of at the signal.
	const held = holdSignalListeners({takeExisting: true});
	held.owner = 'attach';
	drain.setLastHooks(() => asHooks(held));
	let lastProgressLog = 0;
	drain.setHost({
		progress({inflight, upgrades, streams}) {
			const now = performance.now();
			if (now - lastProgressLog >= PROGRESS_LOG_MS) {
				lastProgressLog = now;
				logger.info({inflight, upgrades, streams}, 'drain progress');
			}
		},
		hooksStarting(_counts, proceed) {
			// Alone, nobody needs telling.
			proceed();
		},
		finish(summary) {
			void flushOutput().then(() => {
				logger.info({...summary, outcome: 'clean'}, 'drain finished');
				process.exit(ExitCode.OK);
			});
		},
	});
	/** When the first signal came; undefined until then. */
	let signalledAt: number | undefined;
	const onSignal = (signal: NodeJS.Signals): void => {
		if (signalledAt !== undefined) {
			// The same Ctrl-C often arrives twice at once (the terminal signals the
			// process group, `npm start` forwards it again): only a later one is a
			// second signal.
			if (isDuplicateSignal(signalledAt, performance.now())) {
				logger.info({signal}, 'repeated signal right after the first; ignoring it');
				return;
			}

			logger.warn({signal, inflight: drain.inflight}, 'second signal during the drain; exiting now');
			process.exit(ExitCode.SECOND_SIGNAL);
		}

		signalledAt = performance.now();
		held.received ??= signal;
		blockOutput();
		logger.info({signal}, 'signal received');
		// The deadline goes first: if the app blocks the event loop later, it is
		// still there when the loop comes back.
		setTimeout(() => {
			const {inflight, upgrades, streams} = drain.counts;
			logger.error({inflight, upgrades, streams, outcome: 'forced'}, 'drain finished');
			process.exit(ExitCode.DEADLINE);
		}, timeline.gracePeriodMs);
		drain.begin(timeline);
	};

	held.listenOurselves('SIGTERM', onSignal);
	held.listenOurselves('SIGINT', onSignal);
}
