/**
 * The command after its signals are held (cli.ts): parse, start the primary,
 * exit with the code it settles on (exit-codes.ts). No logic of its own.
 */
import {isatty} from 'node:tty';
import {quickParseArgs, type ParseResult} from './command-line.js';
import {UsageError} from './errors.js';
import {ExitCode} from './exit-codes.js';
import {createLogger, syncWriter} from './logger.js';
import {damagedFiles} from './install-check.js';
import type {SignalGuard} from './own-signals.js';
import {FILES_JSON} from './package-files.js';
import {Primary} from './primary/index.js';
import {chooseLogFormat, prettySink} from './primary/log-format.js';
import {LineOutput, sharedLine} from './primary/output.js';

export interface EarlySignals {
	/** Signals that came while the modules loaded, in order. */
	readonly early: readonly NodeJS.Signals[];
	/** Takes the holding handlers off; the primary's are on by then. */
	release(): void;
	/** Sets aside the signal listeners that are not the primary's (own-signals.ts). */
	readonly guard: Pick<SignalGuard, 'reportTo'>;
}

export async function main({early, release, guard}: EarlySignals): Promise<never> {
	let result: ParseResult;
	try {
		const argv = process.argv.slice(2);
		result = quickParseArgs(argv) ?? (await import('./args.js')).yargsParseArgs(argv);
	} catch (error) {
		if (error instanceof UsageError) {
			process.stderr.write(`graceful-cluster: ${error.message}\n`);
			process.exit(ExitCode.USAGE);
		}

		exitIfNotInstalled(error, 'to read this command line');
		throw error;
	}

	if (result.kind === 'print') {
		process.stdout.write(`${result.text}\n`);
		process.exit(ExitCode.OK);
	}

	for (const warning of result.warnings) {
		process.stderr.write(`graceful-cluster: ${warning}\n`);
	}

	const damaged = damagedFiles(FILES_JSON);
	if (damaged.length > 0) {
		exitIncomplete(damaged.join('; '));
	}

	const {options, workerCount} = result;
	// isatty(), not process.stdout.isTTY: the primary writes to descriptor 1
	// itself (logger.ts), and making process.stdout would set a pipe there
	// non-blocking, for every process that shares it.
	const logFormat = chooseLogFormat(result.logFormat, isatty(1), process.env);
	const line = sharedLine(1, 2);
	const stdout = new LineOutput(logFormat.format === 'pretty' ? await prettySink(syncWriter(1), logFormat.colorize).catch((error: unknown) => {
		exitIfNotInstalled(error, 'for pretty logs (--log-format pretty, the default on a terminal)');
		throw error;
	}) : syncWriter(1), line);
	const stderr = new LineOutput(syncWriter(2), line);
	const logger = createLogger({role: 'primary', level: options.logLevel, destination: stdout});
	process.on('uncaughtException', error => {
		try {
			logger.fatal({err: error}, 'graceful-cluster crashed; please report this at https://github.com/graceful-cluster/graceful-cluster/issues');
		} catch {
			// The logger itself failed (it is what crashed, say): a throw from here
			// would end the process with Node's own code 7, which is HOOK_FAILED's.
			process.stderr.write(`graceful-cluster crashed; please report this at https://github.com/graceful-cluster/graceful-cluster/issues: ${error.stack ?? String(error)}\n`);
		}

		process.exit(ExitCode.INTERNAL);
	});

	guard.reportTo(({signal, listener, action}) => {
		if (action === 'set aside') {
			logger.warn({signal, listener}, 'a signal listener that is not graceful-cluster\'s was set aside in the primary');
		} else {
			logger.warn({signal, listener}, 'another module took graceful-cluster\'s signal listener off in the primary; it is back');
		}
	});

	// Its constructor installs the signal handlers; then the held ones go, and
	// what came early is handed over, in order.
	const primary = new Primary(options, {logger, stdout, stderr});
	release();
	for (const signal of early) {
		logger.info({signal}, 'signal received while graceful-cluster was loading; acting on it now');
		process.emit(signal, signal);
	}

	// A signal that came while loading, or while the metrics server starts, has
	// ended the cluster already: no worker to start.
	if (primary.startsWorkers && options.metrics) {
		try {
			await primary.serveMetrics(options.metrics);
		} catch (error) {
			// Nothing has started yet: a bad --metrics is bad input.
			if (error instanceof UsageError) {
				process.stderr.write(`graceful-cluster: ${error.message}\n`);
				process.exit(ExitCode.USAGE);
			}

			exitIfNotInstalled(error, 'for --metrics');
			throw error;
		}
	}

	if (primary.startsWorkers) {
		logger.info({
			script: options.script,
			args: options.args,
			cwd: options.cwd ?? process.cwd(),
			workers: options.workers,
			workersFrom: workerCount ? workerCount.source : 'flag',
			...(workerCount?.cpuLimit === undefined ? {} : {cpuLimit: workerCount.cpuLimit}),
			availableParallelism: workerCount?.availableParallelism,
			servePeriodMs: options.settings.servePeriodMs,
			rejectPeriodMs: options.settings.rejectPeriodMs,
			gracePeriodMs: options.settings.gracePeriodMs,
		}, 'starting workers');
		if (process.pid === 1) {
			// The kernel drops a signal sent to a namespace's PID 1 that has no handler
			// yet: a SIGTERM during Node's own start (before our first line) is lost,
			// and the pod serves on until its SIGKILL. tini forwards it instead.
			logger.warn({}, 'graceful-cluster is PID 1 with no init in front: a SIGTERM in the first ~100 ms of a start is dropped by the kernel, and orphans are not reaped; run it behind tini (docker run --init, or tini in the image)');
		}
	}

	process.exit(await primary.run());
}

function exitIncomplete(what: string): never {
	process.stderr.write(`graceful-cluster: its installation is incomplete, so nothing was started: ${what}. Reinstall graceful-cluster with its dependencies (npm ci).\n`);
	process.exit(ExitCode.INCOMPLETE_INSTALL);
}

/** Exit code 8 if a package loaded only when needed (yargs, pino-pretty, prom-client) is not installed. */
function exitIfNotInstalled(error: unknown, neededFor: string): void {
	// `import()` says ERR_MODULE_NOT_FOUND; `require()`, as the bundle (CommonJS) loads yargs and prom-client, MODULE_NOT_FOUND.
	const {code, message} = (error ?? {}) as Partial<NodeJS.ErrnoException>;
	const name = code === 'ERR_MODULE_NOT_FOUND' ? /Cannot find package '([^']+)'/.exec(message ?? '')?.[1] : code === 'MODULE_NOT_FOUND' ? /Cannot find module '([^'./][^']*)'/.exec(message ?? '')?.[1] : undefined;
	if (name !== undefined) {
		exitIncomplete(`the package ${name}, which it needs ${neededFor}, is not installed`);
	}
}
