/**
 * The command line: `graceful-cluster [options] <script> [app args...]`.
 *
 * Options come before the script; everything from the script on goes to the app
 * untouched (yargs' `halt-at-non-option`). Every option can also come from
 * `GRACEFUL_CLUSTER_<NAME>`; flags win. Pure apart from reading the environment
 * and checking the script exists, so it is unit-tested with plain arrays.
 */
import {statSync} from 'node:fs';
import path from 'node:path';
import yargs from 'yargs';
import {UsageError} from './errors.js';
import {LOG_LEVELS} from './logger.js';
import type {PrimaryOptions} from './primary/index.js';
import {defaultWorkerCount, type WorkerCount} from './primary/cpu.js';
import {formatDuration} from './duration.js';
import {
	DEFAULT_SETTINGS, envName, parseDurationSetting, parsePath, parseRetryAfter, SETTING_FLAGS, type DrainSettings,
} from './settings.js';
import {checkTimeline} from './timeline.js';

export const USAGE = 'graceful-cluster [options] <script> [app args...]';
const MAX_WORKERS = 1024;

export type ParseResult =
	| {readonly kind: 'run'; readonly options: PrimaryOptions; readonly workerCount: WorkerCount | undefined}
	| {readonly kind: 'print'; readonly text: string};

function parser(argv: readonly string[]) {
	return yargs([...argv])
		.scriptName('graceful-cluster')
		.usage(`${USAGE}\n\nRuns <script> in a cluster of workers and drains it without dropping a request on SIGTERM or SIGINT.`)
		.parserConfiguration({'halt-at-non-option': true, 'parse-positional-numbers': false, 'unknown-options-as-args': false})
		.env('GRACEFUL_CLUSTER')
		.strict()
		.exitProcess(false)
		.fail((message, error) => {
			throw error ?? new UsageError(message);
		})
		.options({
			workers: {alias: 'w', type: 'string', description: 'worker processes to run [default: the container\'s CPU limit, rounded up, at most os.availableParallelism()]'},
			[SETTING_FLAGS.servePeriodMs]: {type: 'string', default: formatDuration(DEFAULT_SETTINGS.servePeriodMs), description: 'after the signal, keep serving new requests (with Connection: close) this long'},
			[SETTING_FLAGS.rejectPeriodMs]: {type: 'string', default: formatDuration(DEFAULT_SETTINGS.rejectPeriodMs), description: 'then answer new requests 503 + Retry-After this long'},
			[SETTING_FLAGS.gracePeriodMs]: {type: 'string', default: formatDuration(DEFAULT_SETTINGS.gracePeriodMs), description: 'hard deadline from the signal; workers still running are killed'},
			[SETTING_FLAGS.retryAfterSeconds]: {type: 'string', default: String(DEFAULT_SETTINGS.retryAfterSeconds), description: 'seconds, the Retry-After value of a drain 503'},
			[SETTING_FLAGS.readinessPath]: {type: 'string', default: DEFAULT_SETTINGS.readinessPath, description: 'readiness probe path: 200, then 503 from the signal on (\'\' turns it off)'},
			[SETTING_FLAGS.livenessPath]: {type: 'string', default: DEFAULT_SETTINGS.livenessPath, description: 'liveness probe path: 200 until exit (\'\' turns it off)'},
			[SETTING_FLAGS.keepAliveTimeoutMs]: {type: 'string', default: formatDuration(DEFAULT_SETTINGS.keepAliveTimeoutMs), description: 'keep-alive timeout of the app\'s attached servers; keep it above the load balancer\'s idle timeout (ALB: 60s). 0 leaves the server\'s own'},
			'listen-timeout': {type: 'string', default: '30s', description: 'a worker that has not listened by then counts as a failed start (0 = wait forever)'},
			'max-start-failures': {type: 'string', default: '5', description: 'failed starts in a row before giving up with exit code 6'},
			'restart-delay': {type: 'string', default: '100ms', description: 'first delay before replacing a crashed worker; doubles on each crash in a row'},
			'max-restart-delay': {type: 'string', default: '15s', description: 'cap on the restart delay'},
			'backoff-reset': {type: 'string', default: '30s', description: 'a worker that stays up this long starts its slot\'s restart delay over'},
			'log-level': {type: 'string', default: 'info', description: `${LOG_LEVELS.join(', ')}`},
		})
		.help()
		.alias('help', 'h')
		.version()
		.alias('version', 'v')
		.epilog('Durations: 500ms, 20s, 2m or a bare number of seconds. Every option can be set as GRACEFUL_CLUSTER_<OPTION> (e.g. GRACEFUL_CLUSTER_REJECT_PERIOD=20s); flags win.\nDocs and exit codes: see README.md.')
		.wrap(Math.min(110, process.stdout.columns ?? 110));
}

function positiveInt(flag: string, text: string, max: number): number {
	if (!/^\d+$/.test(text.trim()) || Number(text) < 1 || Number(text) > max) {
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is not a whole number from 1 to ${max}.`);
	}

	return Number(text);
}

/** Rewrites yargs' strict-mode complaint about an env-only key into one that names the variable. */
function explainUnknown(error: unknown, argv: readonly string[]): unknown {
	const match = error instanceof Error ? /^Unknown arguments?: (.+)$/.exec(error.message) : null;
	if (!match) {
		return error;
	}

	const names = match[1]!.split(', ');
	const vars = names.map(name => envName(name.replaceAll(/[A-Z]/g, c => `-${c.toLowerCase()}`)));
	if (vars.every(name => process.env[name] !== undefined) && !names.some(name => argv.some(arg => arg.replace(/^-+/, '').split('=')[0] === name))) {
		return new UsageError(`Unknown environment variable${vars.length > 1 ? 's' : ''} ${vars.join(', ')}: graceful-cluster reads every GRACEFUL_CLUSTER_* variable as an option. Remove it or fix its name (see --help).`);
	}

	return new UsageError(`${error instanceof Error ? error.message : String(error)}. Options go before the script; run graceful-cluster --help to see them.`);
}

/**
 * Kubernetes injects `<SERVICE>_SERVICE_HOST`, `<SERVICE>_PORT_80_TCP` and the like
 * into every pod for each Service of the namespace; a Service named
 * `graceful-cluster` (or `graceful-cluster-api`) would make them look like our
 * options. Docker's legacy links use the same names. They are not options.
 */
const SERVICE_LINK = /^GRACEFUL_CLUSTER_(?:\w+_)?(?:SERVICE_HOST|SERVICE_PORT(?:_\w+)?|PORT(?:_\d+_(?:TCP|UDP|SCTP)(?:_(?:PROTO|PORT|ADDR))?)?)$/;

/** Runs `fn` with the service-link variables out of the environment yargs reads. */
function withoutServiceLinks<T>(fn: () => T): T {
	const hidden = Object.entries(process.env).filter(([key]) => SERVICE_LINK.test(key));
	for (const [key] of hidden) {
		delete process.env[key];
	}

	try {
		return fn();
	} finally {
		for (const [key, value] of hidden) {
			process.env[key] = value;
		}
	}
}

export function parseArgs(argv: readonly string[], cwd = process.cwd()): ParseResult {
	let output = '';
	let parsed: Record<string, unknown>;
	try {
		parsed = withoutServiceLinks(() => parser(argv).parseSync(argv as string[], {}, (_error, _argv, text) => {
			output = text;
		}) as Record<string, unknown>);
	} catch (error) {
		throw explainUnknown(error, argv);
	}

	if (parsed['help'] === true || parsed['version'] === true) {
		return {kind: 'print', text: output};
	}

	const string = (key: string): string => String(parsed[key]);
	const settings: DrainSettings = {
		servePeriodMs: parseDurationSetting(SETTING_FLAGS.servePeriodMs, string(SETTING_FLAGS.servePeriodMs)),
		rejectPeriodMs: parseDurationSetting(SETTING_FLAGS.rejectPeriodMs, string(SETTING_FLAGS.rejectPeriodMs)),
		gracePeriodMs: parseDurationSetting(SETTING_FLAGS.gracePeriodMs, string(SETTING_FLAGS.gracePeriodMs)),
		retryAfterSeconds: parseRetryAfter(SETTING_FLAGS.retryAfterSeconds, string(SETTING_FLAGS.retryAfterSeconds)),
		readinessPath: parsePath(SETTING_FLAGS.readinessPath, string(SETTING_FLAGS.readinessPath)),
		livenessPath: parsePath(SETTING_FLAGS.livenessPath, string(SETTING_FLAGS.livenessPath)),
		keepAliveTimeoutMs: parseDurationSetting(SETTING_FLAGS.keepAliveTimeoutMs, string(SETTING_FLAGS.keepAliveTimeoutMs)),
	};
	checkTimeline(settings);
	const logLevel = string('log-level');
	if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
		throw new UsageError(`--log-level (GRACEFUL_CLUSTER_LOG_LEVEL): "${logLevel}" is not a level. Use one of ${LOG_LEVELS.join(', ')}.`);
	}

	const positional = (parsed['_'] as unknown[]).map(String);
	const [script, ...args] = positional;
	if (script === undefined) {
		throw new UsageError(`No script given. Usage: ${USAGE}`);
	}

	const scriptPath = path.resolve(cwd, script);
	let isFile = false;
	try {
		isFile = statSync(scriptPath).isFile();
	} catch {}

	if (!isFile) {
		throw new UsageError(`Script not found: ${script} (looked for ${scriptPath}). Pass the path of your server's entry file, after the options.`);
	}

	const workersText = parsed['workers'];
	const workerCount = workersText === undefined ? defaultWorkerCount() : undefined;
	const workers = workerCount ? workerCount.count : positiveInt('workers', String(workersText), MAX_WORKERS);
	const listenTimeoutMs = parseDurationSetting('listen-timeout', string('listen-timeout'));
	const options: PrimaryOptions = {
		script: scriptPath,
		args,
		workers,
		settings,
		logLevel,
		listenTimeoutMs,
		maxStartFailures: positiveInt('max-start-failures', string('max-start-failures'), 1000),
		restartDelayMs: parseDurationSetting('restart-delay', string('restart-delay')),
		maxRestartDelayMs: parseDurationSetting('max-restart-delay', string('max-restart-delay')),
		backoffResetMs: parseDurationSetting('backoff-reset', string('backoff-reset')),
	};
	return {kind: 'run', options, workerCount};
}
