/**
 * The command line: `graceful-cluster [options] <script> [app args...]`.
 * Options come before the script; everything from the script on goes to the
 * app untouched (yargs' `halt-at-non-option`). Every option can also come from
 * `GRACEFUL_CLUSTER_<NAME>`; flags win.
 *
 * Here: the options table, and the quick read of a command line in the plain
 * spellings. yargs (args.ts) costs more to load than the rest of the start and
 * is only needed to print the help or word a complaint.
 */
import {UsageError} from './errors.js';
import {LOG_LEVELS} from './logger.js';
import {defaultWorkerCount, type WorkerCount} from './primary/cpu.js';
import type {LogFormat} from './primary/log-format.js';
import {DEFAULT_PRIMARY_OPTIONS, type PrimaryOptions} from './primary/options.js';
import {formatDuration} from './duration.js';
import {looksLikeScript, resolveScript} from './script.js';
import {DEFAULT_SETTINGS, envName, parseDurationSetting, readSettings, SETTING_FLAGS} from './settings.js';
import {INTERNAL_VARIABLES} from './worker-env.js';
import {forkCwd, logicalCwd} from './working-directory.js';
import {
	MIN_WORKER_TIMEOUT_MS, parseLogFormat, parseLogLevel, parseMetricsAddress, parsePositiveInt, parseSize,
	parseSwitch, parseWholeNumber, parseWorkerTimeout, VALUE_KINDS, type ValueKind,
} from './values.js';

export const USAGE = 'graceful-cluster [options] <script> [app args...]';
const MAX_WORKERS = 1024;
export const ENV_PREFIX = 'GRACEFUL_CLUSTER';

export type ParseResult =
	| {readonly kind: 'run'; readonly options: PrimaryOptions; readonly workerCount: WorkerCount | undefined; readonly logFormat: LogFormat | undefined; readonly warnings: readonly string[]}
	| {readonly kind: 'print'; readonly text: string};

export interface OptionSpec {
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

export const OPTIONS: Readonly<Record<string, OptionSpec>> = {
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
	[SETTING_FLAGS.maxConnectionAgeMs]: {kind: 'duration', default: formatDuration(DEFAULT_SETTINGS.maxConnectionAgeMs), defaultText: 'off', example: '5m', description: 'close a kept-alive connection after its next response once it is this old (±10 %), an HTTP/2 session with a graceful GOAWAY, so clients spread over new pods (0 = off; at least 1s)'},
	[SETTING_FLAGS.maxEventLoopDelayMs]: {kind: 'duration', default: formatDuration(DEFAULT_SETTINGS.maxEventLoopDelayMs), defaultText: 'off', example: '200ms', description: 'answer new requests 503 + Retry-After while a worker\'s event loop lags more than this, instead of queueing them; probes and requests in flight untouched (0 = off; at least 10ms)'},
	'worker-timeout': {kind: 'duration', default: formatDuration(DEFAULT_PRIMARY_OPTIONS.workerTimeoutMs), description: `a listening worker whose event loop is silent this long is killed (SIGKILL) and replaced (0 = off; at least ${formatDuration(MIN_WORKER_TIMEOUT_MS)})`},
	'auto-attach': {kind: 'switch', default: DEFAULT_PRIMARY_OPTIONS.autoAttach ? 'on' : 'off', example: 'off', description: 'drain every HTTP, HTTPS and HTTP/2 server a worker listens on, with no attach() in the app; off: only the servers passed to attach()'},
	'adaptive-reject': {kind: 'switch', default: DEFAULT_PRIMARY_OPTIONS.adaptiveReject ? 'on' : 'off', example: 'on', description: 'end the reject phase early once every peer has been silent for longer than its own traffic explains (a 2 s floor, a quiet window per peer that covers its bursts and tapers, nothing in the last second, confirmed by every worker); --reject-period stays the cap'},
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

export const PARSER_CONFIGURATION = {'halt-at-non-option': true, 'parse-positional-numbers': false, 'unknown-options-as-args': false, 'duplicate-arguments-array': false} as const;

const VALUE_SPELLINGS = new Map<string, string>(Object.entries(OPTIONS).flatMap(([name, spec]) => [
	[`--${name}`, name] as const,
	...(spec.alias === undefined ? [] : [[`-${spec.alias}`, name] as const]),
]));

export interface Given {
	readonly spelling: string;
	readonly name: string;
	readonly value: string;
}

/**
 * yargs-parser reads a value that starts with `-` (`-5s`, `-1`) after its
 * option as more flags ("Unknown arguments: 5, s"): it becomes
 * `--option=value`, so the option's own check names it.
 */
export function scanOptions(argv: readonly string[]): {argv: string[]; given: Given[]} {
	const out: string[] = [];
	const given: Given[] = [];
	for (let i = 0; i < argv.length; i++) {
		const arg = argv[i]!;
		const name = VALUE_SPELLINGS.get(arg);
		if (name === undefined) {
			checkCase(arg);
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

const LONG_OPTIONS = new Set([...Object.keys(OPTIONS), 'help', 'version']);

/**
 * `--reject-Period 3s`, `--LOG-LEVEL=debug`: yargs-parser makes such a key the
 * camelCase form of a known option, which strict mode accepts while the value
 * goes nowhere. The camelCase form itself (`--rejectPeriod`) stays allowed.
 */
function checkCase(arg: string): void {
	if (!arg.startsWith('--')) {
		return;
	}

	const key = arg.slice(2).split('=', 1)[0]!;
	if (key.includes('-') && key !== key.toLowerCase() && LONG_OPTIONS.has(key.toLowerCase())) {
		throw new UsageError(`--${key} is not an option: options are written in lower case. Write --${key.toLowerCase()}${arg.includes('=') ? arg.slice(2 + key.length) : ''}, before the script.`);
	}
}

/** `-w app.mjs` with no script after it: the option took the script as its value. */
export function swallowedScript(given: readonly Given[], cwd: string): UsageError | undefined {
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

/**
 * Kubernetes injects `<SERVICE>_SERVICE_HOST`, `<SERVICE>_PORT_80_TCP` and the
 * like for each Service of the namespace (Docker's legacy links too): a Service
 * named `graceful-cluster` would make them look like our options.
 */
const SERVICE_LINK = /^GRACEFUL_CLUSTER_(?:\w+_)?(?:SERVICE_HOST|SERVICE_PORT(?:_\w+)?|PORT(?:_\d+_(?:TCP|UDP|SCTP)(?:_(?:PROTO|PORT|ADDR))?)?)$/;

/** yargs' `.env()` would read `GRACEFUL_CLUSTER_HELP` as --help: an entrypoint that prints its help and exits 0 is a restart loop nobody notices. */
const flagOnlyVariable = (key: string): (typeof FLAG_ONLY)[string] | undefined =>
	key.startsWith(`${ENV_PREFIX}_`) ? FLAG_ONLY[key.slice(ENV_PREFIX.length + 1).toLowerCase()] : undefined;

/** A service link, or a variable a primary sets for its workers, which a CLI the app starts itself inherits. */
const isNotAnOption = (key: string): boolean => SERVICE_LINK.test(key) || INTERNAL_VARIABLES.has(key);

export function withoutNonOptions<T>(fn: () => T): T {
	const hidden = Object.entries(process.env).filter(([key]) => isNotAnOption(key) || flagOnlyVariable(key) !== undefined);
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
 * What to say of the app's arguments that are graceful-cluster's own long
 * options (`--reject-period 2s` after the script, as `npm run <script> --
 * --flag` puts it): they go to the app, which may mean them, so they are not
 * refused, but said, each once. Not when `--` before the script said that what
 * follows is the app's, and not past a `--` among the app's arguments; and not
 * the short aliases, --help or --version, which apps have of their own.
 */
export function optionsAfterScript(script: string, args: readonly string[], endOfOptions: boolean): string[] {
	if (endOfOptions) {
		return [];
	}

	const end = args.indexOf('--');
	const flags = new Set(args.slice(0, end === -1 ? undefined : end).flatMap(arg => {
		const name = /^--([a-z][a-z\d-]*)(?:=|$)/.exec(arg)?.[1];
		return name !== undefined && Object.hasOwn(OPTIONS, name) ? [`--${name}`] : [];
	}));
	return [...flags].map(flag => `${flag} comes after the app's script, so it goes to the app; put it before ${script} to set graceful-cluster's (if the app's own is meant, a -- before the script says so)`);
}

/**
 * The options from what yargs (or the quick read, the same way) parsed, with
 * their values checked. `scan` is the command line as scanOptions() left it.
 */
export function fromParsed(parsed: Record<string, unknown>, scan: {readonly argv: readonly string[]; readonly given: readonly Given[]}, cwd: string): ParseResult & {kind: 'run'} {
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
		throw new UsageError(`--metrics ${metrics.port} is the port the app is given (PORT=${process.env['PORT']}): the primary would hold it and the app could not listen. Give --metrics another port (${metrics.port === 9091 ? 9464 : 9091}, say).`);
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
		autoAttach: parseSwitch('auto-attach', string('auto-attach')),
		adaptiveReject: parseSwitch('adaptive-reject', string('adaptive-reject')),
		maxMemoryBytes: parseSize('max-memory-restart', string('max-memory-restart')),
		maxRequests: parseWholeNumber('max-requests', string('max-requests')),
		maxRequestsJitter: parseWholeNumber('max-requests-jitter', string('max-requests-jitter')),
	};
	const rest = (parsed['_'] as unknown[]).length;
	const warnings = optionsAfterScript(script, args, scan.argv[scan.argv.length - rest - 1] === '--');
	return {kind: 'run', options, workerCount, logFormat, warnings};
}

const DEFAULTS: Readonly<Record<string, string>> = Object.fromEntries(Object.entries(OPTIONS).flatMap(([name, spec]) => (spec.default === undefined ? [] : [[name, spec.default]])));

const LONG_WITH_VALUE = /^--([a-z][a-z-]*)=(.*)$/s;

/**
 * The options the `GRACEFUL_CLUSTER_<NAME>` variables give; undefined when one
 * is spelled any other way (an alias, a camelCase form, `__`, an unknown
 * name): yargs decides what that means.
 */
function optionsFromEnv(env: Readonly<Record<string, string | undefined>>): Record<string, string> | undefined {
	const options: Record<string, string> = {};
	for (const [key, value] of Object.entries(env)) {
		if (!key.startsWith(ENV_PREFIX)) {
			continue;
		}

		// yargs reads `GRACEFUL_CLUSTERWORKERS`, and complains of `GRACEFUL_CLUSTER`: its own way.
		if (!key.startsWith(`${ENV_PREFIX}_`)) {
			return undefined;
		}

		if (value === undefined || isNotAnOption(key) || flagOnlyVariable(key) !== undefined) {
			continue;
		}

		const upper = key.slice(ENV_PREFIX.length + 1);
		const name = upper.toLowerCase().replaceAll('_', '-');
		if (!/^[A-Z\d]+(?:_[A-Z\d]+)*$/.test(upper) || !Object.hasOwn(OPTIONS, name)) {
			return undefined;
		}

		options[name] = value;
	}

	return options;
}

/**
 * The command line read the way yargs reads it, in the plain spellings only;
 * anything else returns undefined, for yargs. test/unit/command-line.test.ts
 * holds the two reads the same. Not yargs-parser itself: its first call cost
 * the start some 5 ms, a tenth of all the primary does before it forks.
 */
export function quickParseArgs(argv: readonly string[], cwd = logicalCwd()): ParseResult | undefined {
	const scan = scanOptions(argv);
	const values: Record<string, string> = {};
	let rest: string[] = [];
	for (let i = 0; i < scan.argv.length; i++) {
		const arg = scan.argv[i]!;
		const name = VALUE_SPELLINGS.get(arg);
		const long = name === undefined ? LONG_WITH_VALUE.exec(arg) : null;
		if (name !== undefined) {
			// scanOptions() saw to it that a value follows.
			values[name] = scan.argv[++i]!;
		} else if (long !== null && Object.hasOwn(OPTIONS, long[1]!)) {
			// yargs takes one pair of quotes off a value in this form only (`--readiness-path=''`): its own way.
			if (/^["']/.test(long[2]!)) {
				return undefined;
			}

			values[long[1]!] = long[2]!;
		} else if (arg === '--') {
			rest = scan.argv.slice(i + 1);
			break;
		} else if (arg.startsWith('-') && arg !== '-') {
			return undefined;
		} else {
			rest = scan.argv.slice(i);
			break;
		}
	}

	const fromEnv = optionsFromEnv(process.env);
	return fromEnv === undefined ? undefined : fromParsed({...DEFAULTS, ...fromEnv, ...values, _: rest}, scan, cwd);
}
