/**
 * The command line through yargs: what the quick read (command-line.ts) leaves
 * to it, --help and --version and every complaint about an option, in yargs'
 * words.
 */
import yargs from 'yargs';
import {
	ENV_PREFIX, fromParsed, OPTIONS, PARSER_CONFIGURATION, quickParseArgs, scanOptions, swallowedScript,
	USAGE, withoutNonOptions, type ParseResult,
} from './command-line.js';
import {UsageError} from './errors.js';
import {EXIT_CODE_MEANINGS, ExitCode} from './exit-codes.js';
import {HELP_WIDTH, helpWidth, ownVersion} from './print-only.js';
import {envName} from './settings.js';
import {logicalCwd} from './working-directory.js';

export {USAGE, type ParseResult} from './command-line.js';

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
		// A no-break space keeps the two labels on one line when the text wraps.
		description: `${spec.description}  [${spec.kind === 'switch' ? 'on|off' : spec.kind}]\u00A0[default: ${spec.defaultText ?? spec.default}]`,
	}]));
	const y = yargs([...argv])
		.scriptName('graceful-cluster')
		.usage(`${USAGE}\n\nRuns <script> in a cluster of workers and drains it without dropping a request on SIGTERM or SIGINT.`)
		.parserConfiguration(PARSER_CONFIGURATION)
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
/** `rejectPeriod` -> `reject-period`: yargs names an unknown option in both forms. */
const kebab = (name: string): string => name.replaceAll(/[A-Z]/g, c => `-${c.toLowerCase()}`);

/** An option within two edits of `name` (a typo's usual distance), if one is. */
function nearestOption(name: string): string | undefined {
	const distance = (a: string, b: string): number => {
		let previous = Array.from({length: b.length + 1}, (_, index) => index);
		for (const [i, ca] of [...a].entries()) {
			const row = [i + 1];
			for (const [j, cb] of [...b].entries()) {
				row.push(Math.min(previous[j + 1]! + 1, row[j]! + 1, previous[j]! + (ca === cb ? 0 : 1)));
			}

			previous = row;
		}

		return previous[b.length]!;
	};

	const [best] = Object.keys(OPTIONS).map(option => ({option, edits: distance(name, option)})).sort((a, b) => a.edits - b.edits);
	return best !== undefined && best.edits <= 2 && name.length > 2 ? best.option : undefined;
}

/**
 * Rewrites yargs' strict-mode complaint: an env-only key names the variable;
 * an unknown flag is named once (yargs adds its camelCase form), as written,
 * with the option it is likely a typo of.
 */
function explainUnknown(error: unknown, argv: readonly string[]): unknown {
	const match = error instanceof Error ? /^Unknown arguments?: (.+)$/.exec(error.message) : null;
	if (!match) {
		return error;
	}

	const reported = match[1]!.split(', ');
	const names = reported.filter(name => kebab(name) === name || !reported.includes(kebab(name)));
	const vars = names.map(name => envName(kebab(name)));
	if (vars.every(name => process.env[name] !== undefined) && !names.some(name => argv.some(arg => kebab(arg.replace(/^-+/, '').split('=')[0]!) === name))) {
		return new UsageError(`Unknown environment variable${vars.length > 1 ? 's' : ''} ${vars.join(', ')}: graceful-cluster reads every GRACEFUL_CLUSTER_* variable as an option. Remove it or fix its name (see --help).`);
	}

	const flags = names.map(name => {
		const written = argv.some(arg => arg === `--${name}` || arg.startsWith(`--${name}=`)) || name.length > 1 ? `--${name}` : `-${name}`;
		const nearest = nearestOption(kebab(name).toLowerCase().replace(/^-/, ''));
		return `${written}${nearest === undefined ? '' : ` (did you mean --${nearest}?)`}`;
	});
	return new UsageError(`Unknown option${flags.length > 1 ? 's' : ''} ${flags.join(', ')}. Options go before the script; run graceful-cluster --help to see them.`);
}
/** What scripts/write-help.js writes to help.txt at build time: full width, no variable of ours set. */
export function helpText(): string {
	let output = '';
	withoutNonOptions(() => parser(['--help'], HELP_WIDTH).parseSync(['--help'], {}, (_error, _argv, text) => {
		output = text;
	}));
	return output;
}

/**
 * The command line through yargs alone. `cwd`: where a relative script is
 * found from and the workers start; the logical one by default, so both follow
 * a release symlink (working-directory.ts).
 */
export function yargsParseArgs(argv: readonly string[], cwd = logicalCwd()): ParseResult {
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

	return fromParsed(parsed, scan, cwd);
}

export function parseArgs(argv: readonly string[], cwd = logicalCwd()): ParseResult {
	return quickParseArgs(argv, cwd) ?? yargsParseArgs(argv, cwd);
}
