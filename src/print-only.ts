/**
 * `graceful-cluster --version` and `--help` without loading yargs, which costs
 * more than the rest of such a run (issue 21). Answered here only where the
 * answer is yargs' own byte for byte: the flag alone, no `GRACEFUL_CLUSTER_*`
 * variable (yargs reads them as options, and some make `--help` an error), and
 * for `--help` the width and language help.txt was written at (yargs wraps to
 * the terminal and translates its headings). Anything else goes through
 * args.ts; test/unit/print-only.test.ts holds the two to the same text.
 */
import {readFileSync} from 'node:fs';
import {HELP_FILE, PACKAGE_JSON} from './package-files.js';

/** The widest help; narrower on a narrower terminal. */
export const HELP_WIDTH = 110;

export const helpWidth = (): number => Math.min(HELP_WIDTH, process.stdout.columns ?? HELP_WIDTH);

export function ownVersion(): string {
	try {
		const {version} = JSON.parse(readFileSync(PACKAGE_JSON, 'utf8')) as {version?: unknown};
		return typeof version === 'string' ? version : 'unknown';
	} catch {
		return 'unknown';
	}
}

/** The locale yargs would pick, by its own rule, gives help.txt's English headings (C and POSIX have no file: English stands). */
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
