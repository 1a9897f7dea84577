/**
 * `graceful-cluster --version` and `--help` without loading yargs, which costs
 * more than the rest of such a run (issue 21). Only the plain cases are answered
 * here, where the answer is known to be yargs' own, byte for byte:
 *
 * - the flag alone on the command line;
 * - no `GRACEFUL_CLUSTER_*` variable in the environment (yargs reads them as
 *   options, and some make `--help` an error: args.ts);
 * - for `--help`, the text the build wrote with yargs (help.txt,
 *   package-files.ts) at its width and in its language: yargs wraps to the
 *   terminal and translates its headings for the locale.
 *
 * Anything else, or no help.txt (a build by plain `tsc`), goes through args.ts
 * as before. test/unit/print-only.test.ts holds the two to the same text.
 */
import {readFileSync} from 'node:fs';
import {HELP_FILE, PACKAGE_JSON} from './package-files.js';

/** The widest help; narrower on a narrower terminal. */
export const HELP_WIDTH = 110;

export const helpWidth = (): number => Math.min(HELP_WIDTH, process.stdout.columns ?? HELP_WIDTH);

/** graceful-cluster's own version, from the package.json it was installed with. */
export function ownVersion(): string {
	try {
		const {version} = JSON.parse(readFileSync(PACKAGE_JSON, 'utf8')) as {version?: unknown};
		return typeof version === 'string' ? version : 'unknown';
	} catch {
		return 'unknown';
	}
}

/**
 * The locale yargs would pick, by its own rule (the first of these variables
 * set, up to a `.` or `:`), gives the English headings help.txt has: an `en`
 * locale (yargs' en.json), or C or POSIX (no file of their own: yargs' English
 * keys stand).
 */
export function yargsSpeaksEnglish(env: Record<string, string | undefined>): boolean {
	const locale = (env['LC_ALL'] || env['LC_MESSAGES'] || env['LANG'] || env['LANGUAGE'] || 'en_US').replace(/[.:].*/, '');
	return /^en(?:_[A-Za-z]+)?$/.test(locale) || locale === 'C' || locale === 'POSIX';
}

/** What `graceful-cluster <argv>` prints and exits 0 on, when it is known without yargs; otherwise undefined. */
export function printOnly(argv: readonly string[], env: Record<string, string | undefined>): string | undefined {
	if (argv.length !== 1 || Object.keys(env).some(key => key.startsWith('GRACEFUL_CLUSTER_'))) {
		return undefined;
	}

	switch (argv[0]) {
		case '--version':
		case '-v': {
			return ownVersion();
		}

		case '--help':
		case '-h': {
			if (helpWidth() !== HELP_WIDTH || !yargsSpeaksEnglish(env)) {
				return undefined;
			}

			try {
				return readFileSync(HELP_FILE, 'utf8');
			} catch {
				return undefined;
			}
		}

		default: {
			return undefined;
		}
	}
}
