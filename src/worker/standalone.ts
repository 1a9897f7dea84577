/**
 * The drain's host when the app runs alone (`node server.js`): no primary, so this
 * process takes the signal itself, keeps its own deadline and exits with the CLI's codes.
 */
import {openOf, tallyOf} from '../counts.js';
import {logDrainFinished, type DrainFinished} from '../drain-finished.js';
import {ExitCode} from '../exit-codes.js';
import type {Logger} from '../logger.js';
import {isCleanShutdownCode} from '../signals.js';
import {isDuplicateSignal, type Timeline} from '../timeline.js';
import type {DrainSummary, ProcessDrain} from './drain.js';
import {appExitCode, clearCodeSetBefore, exitOurselves, ExitWatch, failingExitCode} from './app-exit.js';
import {appShutdown} from './app-shutdown.js';
import {holdSignalListeners} from './signal-listeners.js';
import {blockOutput, flushOutput} from './stdio.js';

/** At most one `drain progress` line a second: the drain reports four times as often. */
const PROGRESS_LOG_MS = 1000;

export function runStandalone(drain: ProcessDrain, logger: Logger, timeline: Timeline): void {
	const held = holdSignalListeners({ownExisting: false, signals: ['SIGTERM', 'SIGINT']});
	held.owner = 'attach';
	let deadline: NodeJS.Timeout | undefined;
	const app = appShutdown(held, logger);
	drain.setAppShutdown({
		has: app.has,
		names: app.names,
		async run(signal, reason, onFailure) {
			// While the app's own shutdown finishes, the deadline must not keep alive a process
			// that has nothing else left.
			deadline?.unref();
			try {
				return await app.run(signal, reason, onFailure);
			} finally {
				deadline?.ref();
			}
		},
	});
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
			proceed();
		},
		finish(summary, exit) {
			clearCodeSetBefore(codeAtSignal, logger);
			void flushOutput().then(() => {
				const code = report(summary, failingExitCode());
				if (exit === 'now') {
					process.exit(code);
				}

				// The process ends by itself, bounded by the deadline but not kept alive by it.
				deadline?.unref();
				process.exitCode = code;
				new ExitWatch(logger).blame('the app\'s beforeExit or exit listeners');
			});
		},
	});
	/** `appExit`: the failing code the app asked for is the process's, as under plain Node. */
	let reported = false;
	/** `summary`: the drain's, as of its end (taken before the output was flushed). */
	const finished = (summary: DrainSummary, line: Pick<DrainFinished, 'exitCode' | 'hooksFailed' | 'responsesCut' | 'appExit' | 'more'>): void => {
		reported = true;
		logDrainFinished(logger, {signal: held.received, durationMs: summary.durationMs, figures: tallyOf(summary), ...line});
	};

	const report = (summary: DrainSummary, appExit: number | undefined): number => {
		const hooksFailed = summary.hooksFailed + (appExit === undefined ? 0 : 1);
		const code = appExit ?? (hooksFailed > 0 ? ExitCode.HOOK_FAILED : ExitCode.OK);
		// No adaptive end alone: that is the primary's.
		const arrivals = drain.arrivals.report();
		finished(summary, {
			exitCode: code,
			appExit: appExit !== undefined,
			hooksFailed,
			responsesCut: 0,
			more: arrivals ? {lastArrivalMs: arrivals.lastMs, lastArrivalFrom: arrivals.lastFrom, arrivals: arrivals.total, arrivalsBySecond: arrivals.bySecond} : undefined,
		});
		return code;
	};

	// The app's own shutdown may end the process itself (`process.exit(0)` once its
	// pool is closed): the drain is over then too, with the app's code.
	held.listenOurselves('exit', (code: number) => {
		if (!reported && drain.phaseName === 'hooks') {
			process.exitCode = report(drain.summary(), isCleanShutdownCode(code) ? undefined : code);
		}
	});

	/** `hooksCut`: a hook still running, counted as failed. */
	const forced = (exitCode: number, hooksCut: number): void => {
		const open = openOf(drain.counts);
		const summary = drain.summary();
		finished(summary, {exitCode, hooksFailed: summary.hooksFailed + hooksCut, responsesCut: open.inflight, more: open});
	};

	let signalledAt: number | undefined;
	let codeAtSignal: number | undefined;
	const onSignal = (signal: NodeJS.Signals): void => {
		if (signalledAt !== undefined) {
			// The same Ctrl-C often arrives twice at once (the terminal signals the process
			// group, `npm start` forwards it again).
			if (isDuplicateSignal(signalledAt, performance.now())) {
				logger.info({signal}, 'repeated signal right after the first; ignoring it');
				return;
			}

			logger.warn({signal, inflight: drain.inflight}, 'second signal during the drain; exiting now');
			forced(ExitCode.SECOND_SIGNAL, 0);
			exitOurselves(ExitCode.SECOND_SIGNAL);
		}

		signalledAt = performance.now();
		codeAtSignal = appExitCode();
		held.received ??= signal;
		blockOutput();
		logger.info({signal}, 'signal received');
		// The deadline goes first: if the app blocks the event loop later, it is still there.
		deadline = setTimeout(() => {
			forced(ExitCode.DEADLINE, drain.phaseName === 'hooks' ? 1 : 0);
			exitOurselves(ExitCode.DEADLINE);
		}, timeline.gracePeriodMs);
		drain.begin(timeline, signal);
	};

	held.listenOurselves('SIGTERM', onSignal);
	held.listenOurselves('SIGINT', onSignal);
}
