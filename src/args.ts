/**
 * The command line: `graceful-cluster [options] <script> [app args...]`.
 *
 * Options come before the script; everything from the script on goes to the app
 * untouched (yargs' `halt-at-non-option`). Every option can also come from
 * `GRACEFUL_CLUSTER_<NAME>`; flags win (--help and --version are flags only).
 * Every slip is a `UsageError` that names the flag or variable and what to write
 * instead. Pure apart from reading the environment and looking at the script's
 * path (and, for a directory, the entry file in it), so it is unit-tested with
 * plain arrays.
 *
 * Here: the options table and how yargs reads it. The values' parsers are in
 * values.ts, finding the script in script.ts.
 */
import yargs from 'yargs';
import {UsageError} from './errors.js';
import {EXIT_CODE_MEANINGS, ExitCode} from './exit-codes.js';
import {LOG_LEVELS} from './logger.js';
import {defaultWorkerCount, type WorkerCount} from './primary/cpu.js';
import type {LogFormat} from './primary/log-format.js';
import {DEFAULT_PRIMARY_OPTIONS, type PrimaryOptions} from './primary/options.js';
import {formatDuration} from './duration.js';
import {looksLikeScript, resolveScript} from './script.js';
import {DEFAULT_SETTINGS, envName, parseDurationSetting, readSettings, SETTING_FLAGS} from './settings.js';
import {forkCwd, logicalCwd} from './working-directory.js';
import {HELP_WIDTH, helpWidth, ownVersion} from './print-only.js';
import {
	MIN_WORKER_TIMEOUT_MS, parseLogFormat, parseLogLevel, parseMetricsAddress, parsePositiveInt, parseSize,
	parseSwitch, parseWholeNumber, parseWorkerTimeout, VALUE_KINDS, type ValueKind,
} from './values.js';

export const USAGE = 'graceful-cluster [options] <script> [app args...]';
const MAX_WORKERS = 1024;
const ENV_PREFIX = 'GRACEFUL_CLUSTER';

export type ParseResult =
	| {readonly kind: 'run'; readonly options: PrimaryOptions; readonly workerCount: WorkerCount | undefined; readonly logFormat: LogFormat | undefined}
	| {readonly kind: 'print'; readonly text: string};

interface OptionSpec {
	readonly kind: ValueKind;
	readonly description: string;
	readonly alias?: string;
	/** Given to yargs; absent: the option's default is worked out later. */
	readonly default?: string;
	/** What `--help` shows as the default, when it is not `default` itself. */
	readonly defaultText?: string;
	/** A value to show in messages, when the default is not a good one. */
	readonly example?: string;
}

/** Every option but --help and --version; each takes one value. */
const OPTIONS: Readonly<Record<string, OptionSpec>> = {
	workers: {alias: 'w', kind: 'number', example: '4', description: 'worker processes to run', defaultText: 'the container\'s CPU limit, rounded up, at most os.availableParallelism()'},
	[SETTING_FLAGS.servePeriodMs]: {kind: 'duration', default: formatDuration(DEFAULT_SETTINGS.servePeriodMs), example: '30s', description: 'after the signal, keep serving new requests (with Connection: close) this long'},
	[SETTING_FLAGS.rejectPeriodMs]: {kind: 'duration', default: formatDuration(DEFAULT_SETTINGS.rejectPeriodMs), description: 'then answer new requests 503 + Retry-After this long'},
	[SETTING_FLAGS.gracePeriodMs]: {kind: 'duration', default: formatDuration(DEFAULT_SETTINGS.gracePeriodMs), description: 'hard deadline from the signal; workers still running are killed'},
	[SETTING_FLAGS.retryAfterSeconds]: {kind: 'seconds', default: String(DEFAULT_SETTINGS.retryAfterSeconds), description: 'the Retry-After value of a drain 503'},
	[SETTING_FLAGS.readinessPath]: {kind: 'path', default: DEFAULT_SETTINGS.readinessPath, description: 'readiness probe path: 200, then 503 from the signal on (\'\' turns it off)'},
	[SETTING_FLAGS.livenessPath]: {kind: 'path', default: DEFAULT_SETTINGS.livenessPath, description: 'liveness probe path: 200 until exit (\'\' turns it off); not the readiness path'},
	[SETTING_FLAGS.keepAliveTimeoutMs]: {kind: 'duration', default: formatDuration(DEFAULT_SETTINGS.keepAliveTimeoutMs), description: 'keep-alive timeout of the app\'s attached servers; keep it above the load balancer\'s idle timeout (ALB: 60s). 0 leaves the server\'s own'},
	'listen-timeout': {kind: 'duration', default: formatDuration(DEFAULT_PRIMARY_OPTIONS.listenTimeoutMs), description: 'a worker that has not listened by then counts as a failed start; a reload\'s new worker must also pass its readiness checks by then (0 = wait forever)'},
	'max-start-failures': {kind: 'number', default: String(DEFAULT_PRIMARY_OPTIONS.maxStartFailures), description: 'failed starts in a row before giving up with exit code 6'},
	'restart-delay': {kind: 'duration', default: formatDuration(DEFAULT_PRIMARY_OPTIONS.restartDelayMs), description: 'first delay before replacing a crashed worker; doubles on each crash in a row'},
	'max-restart-delay': {kind: 'duration', default: formatDuration(DEFAULT_PRIMARY_OPTIONS.maxRestartDelayMs), description: 'cap on the restart delay'},
	'backoff-reset': {kind: 'duration', default: formatDuration(DEFAULT_PRIMARY_OPTIONS.backoffResetMs), description: 'a worker that stays up this long starts its slot\'s restart delay over'},
	[SETTING_FLAGS.checkTimeoutMs]: {kind: 'duration', default: formatDuration(DEFAULT_SETTINGS.checkTimeoutMs), description: 'each of attach()\'s readinessChecks fails after this long'},
	'worker-timeout': {kind: 'duration', default: formatDuration(DEFAULT_PRIMARY_OPTIONS.workerTimeoutMs), description: `a listening worker whose event loop is silent this long is killed (SIGKILL) and replaced (0 = off; at least ${formatDuration(MIN_WORKER_TIMEOUT_MS)})`},
	'adaptive-reject': {kind: 'switch', default: DEFAULT_PRIMARY_OPTIONS.adaptiveReject ? 'on' : 'off', example: 'on', description: 'end the reject phase early once the load balancers have provably stopped sending (a 2 s floor, each peer silent for its quiet window, nothing in the last second); --reject-period stays the cap'},
	'hung-stack': {kind: 'switch', default: DEFAULT_PRIMARY_OPTIONS.hungStack ? 'on' : 'off', example: 'on', description: 'capture a hung worker\'s JavaScript stack before the kill (a thread per worker: about 10 MB RSS each)'},
	'max-memory-restart': {kind: 'size', default: String(DEFAULT_PRIMARY_OPTIONS.maxMemoryBytes), defaultText: 'off', example: '300M', description: 'replace a worker whose RSS stays above this, new worker first (0 = off)'},
	'max-requests': {kind: 'number', default: String(DEFAULT_PRIMARY_OPTIONS.maxRequests), example: '10000', description: 'replace a worker after this many requests, new worker first (0 = off)'},
	'max-requests-jitter': {kind: 'number', default: String(DEFAULT_PRIMARY_OPTIONS.maxRequestsJitter), example: '1000', description: 'add a random 0..n to each worker\'s --max-requests, so they do not all recycle together'},
	'log-level': {kind: 'level', default: DEFAULT_PRIMARY_OPTIONS.logLevel, description: LOG_LEVELS.join(', ')},
	'log-format': {kind: 'format', example: 'pretty', defaultText: 'json; pretty on a terminal', description: 'json (JSON lines) or pretty (one coloured line per event; no colour with NO_COLOR)'},
	metrics: {kind: 'address', example: '9091', defaultText: 'off', description: 'serve GET /metrics (Prometheus) and GET /status on this port from the primary; a bare port binds every interface'},
};

/** The flags that take no value; yargs' `.env()` would read them from variables too. */
const FLAG_ONLY: Readonly<Record<string, {readonly flag: string; readonly prints: 'help' | 'version'}>> = {
	help: {flag: '--help', prints: 'help'},
	h: {flag: '-h', prints: 'help'},
	version: {flag: '--version', prints: 'version'},
	v: {flag: '-v', prints: 'version'},
};

/** Word-wraps `text` to `width`, indenting the lines after the first by `indent`. */
function hang(text: string, width: number, indent: number): string {
	const lines: string[] = [];
	let line = '';
	for (const word of text.split(' ')) {
		if (line !== '' && line.length + 1 + word.length > width) {
			lines.push(line);
			line = ' '.repeat(indent) + word;
		} else {
			line = line === '' ? word : `${line} ${word}`;
		}
	}

	return [...lines, line].join('\n');
}

function exitCodeTable(width: number): string {
	const names = Object.keys(ExitCode) as Array<keyof typeof ExitCode>;
	const nameWidth = Math.max(...names.map(name => name.length));
	const rows = names.map(name => {
		const head = `${ExitCode[name]}  ${name.padEnd(nameWidth)}  `;
		return hang(head + EXIT_CODE_MEANINGS[name], width, head.length);
	});
	return ['Exit codes:', ...rows].join('\n');
}

function parser(argv: readonly string[], width = helpWidth()) {
	const options = Object.fromEntries(Object.entries(OPTIONS).map(([name, spec]) => [name, {
		type: 'string' as const,
		...(spec.alias === undefined ? {} : {alias: spec.alias}),
		...(spec.default === undefined ? {} : {default: spec.default}),
		// Types and defaults are ours (yargs would label every option [string]): see hide-types.
		// (a no-break space keeps the two labels on one line when the text wraps)
		description: `${spec.description}  [${spec.kind === 'switch' ? 'on|off' : spec.kind}]\u00A0[default: ${spec.defaultText ?? spec.default}]`,
	}]));
	const y = yargs([...argv])
		.scriptName('graceful-cluster')
		.usage(`${USAGE}\n\nRuns <script> in a cluster of workers and drains it without dropping a request on SIGTERM or SIGINT.`)
		.parserConfiguration({'halt-at-non-option': true, 'parse-positional-numbers': false, 'unknown-options-as-args': false, 'duplicate-arguments-array': false})
		.env(ENV_PREFIX)
		.strict()
		.exitProcess(false)
		.fail((message, error) => {
			throw error ?? new UsageError(message);
		})
		.options(options)
		.help('help', 'show this help and exit')
		.alias('help', 'h')
		// Ours, not the nearest package.json's: yargs would print the app's version
		// once graceful-cluster is installed in it.
		.version(ownVersion())
		.alias('version', 'v')
		.describe('version', 'print the version and exit')
		.epilog(`Durations: 500ms, 20s, 2m or a bare number of seconds. Every option can be set as ${ENV_PREFIX}_<OPTION> (e.g. ${ENV_PREFIX}_REJECT_PERIOD=20s); flags win. --help and --version are flags only. Docs: README.md.\n\n${exitCodeTable(width)}`)
		.wrap(width);
	// In yargs 18, missing from @types/yargs 17.
	return (y as typeof y & {usageConfiguration(config: {'hide-types': boolean}): typeof y}).usageConfiguration({'hide-types': true});
}

/** A value option as written on the command line (`--workers`, `-w`), and its name. */
const VALUE_SPELLINGS = new Map<string, string>(Object.entries(OPTIONS).flatMap(([name, spec]) => [
	[`--${name}`, name] as const,
	...(spec.alias === undefined ? [] : [[`-${spec.alias}`, name] as const]),
]));

interface Given {
	readonly spelling: string;
	readonly name: string;
	readonly value: string;
}

/**
 * Reads the options before the script the way yargs will, and fixes the one
 * thing yargs-parser gets wrong for us: a value that starts with `-` (`-5s`,
 * `-1`) after its option would be read as more flags ("Unknown arguments: 5, s").
 * It becomes `--option=value`, so the option's own check names it. An option
 * with no value after it at all is an error here.
 */
function scanOptions(argv: readonly string[]): {argv: string[]; given: Given[]} {
	const out: string[] = [];
	const given: Given[] = [];
	for (let i = 0; i < argv.length; i++) {
		const arg = argv[i]!;
		const name = VALUE_SPELLINGS.get(arg);
		if (name === undefined) {
			out.push(arg);
			if (arg === '--' || !arg.startsWith('-') || arg === '-') {
				out.push(...argv.slice(i + 1)); // the script and the app's arguments
				break;
			}

			continue;
		}

		const next = argv[i + 1];
		if (next === undefined || next.startsWith('--') || VALUE_SPELLINGS.has(next) || Object.values(FLAG_ONLY).some(({flag}) => flag === next)) {
			const spec = OPTIONS[name]!;
			throw new UsageError(`${arg} (${envName(name)}) needs a value, ${VALUE_KINDS[spec.kind]}: write ${arg} ${spec.example ?? spec.default}, before the script.`);
		}

		if (next.startsWith('-')) {
			out.push(`${arg}=${next}`);
		} else {
			out.push(arg, next);
		}

		given.push({spelling: arg, name, value: next});
		i++;
	}

	return {argv: out, given};
}

/** `-w app.mjs` with no script after it: the option took the script as its value. */
function swallowedScript(given: readonly Given[], cwd: string): UsageError | undefined {
	const swallowed = given.findLast(({value}) => looksLikeScript(value, cwd));
	if (swallowed === undefined) {
		return undefined;
	}

	const {spelling, name, value} = swallowed;
	const spec = OPTIONS[name]!;
	const long = spelling === `--${name}` ? spelling : `${spelling} (--${name})`;
	return new UsageError(
		`${long} takes ${VALUE_KINDS[spec.kind]}, but "${value}" after it looks like the script, so no script was given. `
		+ `Give ${spelling} its value before the script: graceful-cluster ${spelling} ${spec.example ?? spec.default} ${value}, or leave ${spelling} out for its default.`,
	);
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

/**
 * `GRACEFUL_CLUSTER_HELP`, `_VERSION` (or `_H`, `_V`): yargs' `.env()` would read
 * them as --help/--version, and an entrypoint that prints its help and exits 0
 * is a restart loop nobody notices.
 */
const flagOnlyVariable = (key: string): (typeof FLAG_ONLY)[string] | undefined =>
	key.startsWith(`${ENV_PREFIX}_`) ? FLAG_ONLY[key.slice(ENV_PREFIX.length + 1).toLowerCase()] : undefined;

/** Runs `fn` with the variables that are not options out of the environment yargs reads. */
function withoutNonOptions<T>(fn: () => T): T {
	const hidden = Object.entries(process.env).filter(([key]) => SERVICE_LINK.test(key) || flagOnlyVariable(key) !== undefined);
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

function checkFlagOnlyVariables(): void {
	for (const [key, value] of Object.entries(process.env)) {
		const flagOnly = flagOnlyVariable(key);
		if (flagOnly !== undefined) {
			const {flag, prints: what} = flagOnly;
			throw new UsageError(
				`${key} is set (to "${value}"), but ${flag} is a command-line flag, not an option a variable can set: `
				+ `as "true" it makes graceful-cluster print its ${what} and exit 0 instead of starting the app. `
				+ `Remove ${key} from the environment; run graceful-cluster ${flag} to see the ${what}.`,
			);
		}
	}
}

/**
 * `--help` as yargs prints it at full width, with no variable of ours set (in
 * the locale the caller runs in): what scripts/write-help.js writes to help.txt
 * at build time, for print-only.ts.
 */
export function helpText(): string {
	let output = '';
	withoutNonOptions(() => parser(['--help'], HELP_WIDTH).parseSync(['--help'], {}, (_error, _argv, text) => {
		output = text;
	}));
	return output;
}

/**
 * `cwd`: the directory a relative script is found from and the workers start
 * in; the logical one by default, so both follow a release symlink
 * (working-directory.ts).
 */
export function parseArgs(argv: readonly string[], cwd = logicalCwd()): ParseResult {
	const scan = scanOptions(argv);
	let output = '';
	let parsed: Record<string, unknown>;
	try {
		parsed = withoutNonOptions(() => parser(scan.argv).parseSync(scan.argv, {}, (_error, _argv, text) => {
			output = text;
		}) as Record<string, unknown>);
	} catch (error) {
		throw swallowedScript(scan.given, cwd) ?? explainUnknown(error, argv);
	}

	if (parsed['help'] === true || parsed['version'] === true) {
		return {kind: 'print', text: output};
	}

	checkFlagOnlyVariables();
	const [script, ...args] = (parsed['_'] as unknown[]).map(String);
	if (script === undefined) {
		throw swallowedScript(scan.given, cwd) ?? new UsageError(`No script given. Usage: ${USAGE}`);
	}

	const scriptPath = resolveScript(script, cwd, () => swallowedScript(scan.given, cwd));
	const string = (key: string): string => String(parsed[key]);
	const settings = readSettings(flag => string(flag));
	const logLevel = parseLogLevel('log-level', string('log-level'));
	const logFormat = parsed['log-format'] === undefined ? undefined : parseLogFormat('log-format', string('log-format'));
	const metrics = parsed['metrics'] === undefined ? undefined : parseMetricsAddress(string('metrics'));
	if (metrics !== undefined && process.env['PORT'] !== undefined && Number(process.env['PORT']) === metrics.port) {
		// The usual way an app is told its port: caught before any worker starts.
		throw new UsageError(`--metrics ${metrics.port} is the port the app is given (PORT=${process.env['PORT']}): the primary would hold it and the app could not listen. Give --metrics another port (9091, say).`);
	}

	const workersText = parsed['workers'];
	const workerCount = workersText === undefined ? defaultWorkerCount() : undefined;
	const workers = workerCount ? workerCount.count : parsePositiveInt('workers', String(workersText), MAX_WORKERS);
	const options: PrimaryOptions = {
		script: scriptPath,
		args,
		cwd: forkCwd(cwd),
		workers,
		settings,
		logLevel,
		listenTimeoutMs: parseDurationSetting('listen-timeout', string('listen-timeout')),
		maxStartFailures: parsePositiveInt('max-start-failures', string('max-start-failures'), 1000),
		restartDelayMs: parseDurationSetting('restart-delay', string('restart-delay')),
		maxRestartDelayMs: parseDurationSetting('max-restart-delay', string('max-restart-delay')),
		backoffResetMs: parseDurationSetting('backoff-reset', string('backoff-reset')),
		metrics,
		workerTimeoutMs: parseWorkerTimeout('worker-timeout', string('worker-timeout')),
		hungStack: parseSwitch('hung-stack', string('hung-stack')),
		adaptiveReject: parseSwitch('adaptive-reject', string('adaptive-reject')),
		maxMemoryBytes: parseSize('max-memory-restart', string('max-memory-restart')),
		maxRequests: parseWholeNumber('max-requests', string('max-requests')),
		maxRequestsJitter: parseWholeNumber('max-requests-jitter', string('max-requests-jitter')),
	};
	return {kind: 'run', options, workerCount, logFormat};
}
