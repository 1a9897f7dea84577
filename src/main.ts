/**
 * The command after its signals are held (cli.ts): parse, start the primary,
 * exit with the code it settles on (exit-codes.ts). No logic of its own.
 */
import {quickParseArgs, type ParseResult} from './command-line.js';
import {UsageError} from './errors.js';
import {ExitCode} from './exit-codes.js';
import {createHeldLogger, syncWriter} from './logger.js';
import {Primary} from './primary/index.js';
import {chooseLogFormat, prettySink} from './primary/log-format.js';

export interface EarlySignals {
	/** Signals that came while the modules loaded, in order. */
	readonly early: readonly NodeJS.Signals[];
	/** Takes the holding handlers off; the primary's are on by then. */
	release(): void;
}

export async function main({early, release}: EarlySignals): Promise<never> {
	let result: ParseResult;
	try {
		// yargs only when the quick read leaves it something to do (command-line.ts).
		const argv = process.argv.slice(2);
		result = quickParseArgs(argv) ?? (await import('./args.js')).yargsParseArgs(argv);
	} catch (error) {
		if (error instanceof UsageError) {
			process.stderr.write(`graceful-cluster: ${error.message}\n`);
			process.exit(ExitCode.USAGE);
		}

		throw error;
	}

	if (result.kind === 'print') {
		process.stdout.write(`${result.text}\n`);
		process.exit(ExitCode.OK);
	}

	const {options, workerCount} = result;
	const logFormat = chooseLogFormat(result.logFormat, process.stdout.isTTY === true, process.env);
	const stdout = logFormat.format === 'pretty' ? await prettySink(syncWriter(1), logFormat.colorize) : syncWriter(1);
	const stderr = syncWriter(2);
	// Its lines wait until the workers are forked (logger.ts).
	const {logger, release: writeHeldLines} = createHeldLogger({role: 'primary', level: options.logLevel, destination: stdout});
	// Its constructor installs the signal handlers; then the held ones go, and
	// what came early is handed over, in order.
	const primary = new Primary(options, {logger, stdout, stderr});
	release();
	for (const signal of early) {
		logger.info({signal}, 'signal received while graceful-cluster was loading; acting on it now');
		process.emit(signal, signal);
	}

	if (options.metrics) {
		try {
			await primary.serveMetrics(options.metrics);
		} catch (error) {
			// Nothing has started yet: a bad --metrics is bad input.
			if (error instanceof UsageError) {
				process.stderr.write(`graceful-cluster: ${error.message}\n`);
				process.exit(ExitCode.USAGE);
			}

			throw error;
		}
	}

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

	process.on('uncaughtException', error => {
		logger.fatal({err: error}, 'graceful-cluster crashed; please report this');
		process.exit(ExitCode.INTERNAL);
	});

	let running: Promise<ExitCode>;
	try {
		running = primary.run();
	} finally {
		writeHeldLines();
	}

	process.exit(await running);
}
