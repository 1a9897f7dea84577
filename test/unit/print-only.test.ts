// --version and --help without yargs (print-only.ts): only where the text is yargs' own.
import test from 'ava';
import {helpText, parseArgs} from '../../src/args.js';
import {HELP_WIDTH, helpWidth, printOnly, yargsSpeaksEnglish} from '../../src/print-only.js';
import {ROOT} from '../helpers/cluster.js';

const LOCALE_KEYS = ['LC_ALL', 'LC_MESSAGES', 'LANG', 'LANGUAGE'] as const;

/** Runs `fn` with these locale variables (and no others of the four), then puts the environment back. */
function withLocale<T>(locale: Partial<Record<(typeof LOCALE_KEYS)[number], string>>, fn: () => T): T {
	const saved = Object.fromEntries(LOCALE_KEYS.map(key => [key, process.env[key]]));
	for (const key of LOCALE_KEYS) {
		delete process.env[key];
	}

	Object.assign(process.env, locale);
	try {
		return fn();
	} finally {
		// Set and deleted in place: yargs keeps the process.env object it first saw.
		for (const key of LOCALE_KEYS) {
			if (saved[key] === undefined) {
				delete process.env[key];
			} else {
				process.env[key] = saved[key];
			}
		}
	}
}

const printed = (argv: string[]): string => {
	const result = parseArgs(argv, ROOT);
	return result.kind === 'print' ? result.text : '';
};

const noVariables = (): Record<string, string | undefined> => Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('GRACEFUL_CLUSTER_')));

test.serial('the built help.txt is yargs\' --help, in every locale it is used for', t => {
	for (const locale of [{}, {LANG: 'C.UTF-8'}, {LC_ALL: 'POSIX'}, {LANG: 'en_US.UTF-8'}, {LC_MESSAGES: 'en_GB'}, {LANGUAGE: 'en'}]) {
		withLocale(locale, () => {
			const env = {...noVariables(), ...locale};
			t.true(yargsSpeaksEnglish(env), JSON.stringify(locale));
			t.is(printOnly(['--help'], env), helpText(), JSON.stringify(locale));
			if (helpWidth() === HELP_WIDTH) {
				t.is(printOnly(['-h'], env), printed(['-h']), JSON.stringify(locale));
			}
		});
	}
});

test.serial('another language goes to yargs, which translates its headings', t => {
	withLocale({LANG: 'de_DE.UTF-8'}, () => {
		t.false(yargsSpeaksEnglish({LANG: 'de_DE.UTF-8'}));
		t.is(printOnly(['--help'], {LANG: 'de_DE.UTF-8'}), undefined);
		t.not(helpText(), withLocale({}, helpText));
	});
	t.false(yargsSpeaksEnglish({LC_ALL: 'fr_FR', LANG: 'en_US'}), 'LC_ALL first, as yargs reads them');
	t.true(yargsSpeaksEnglish({LC_ALL: '', LANG: 'en_US'}), 'an empty one is skipped');
});

test.serial('--version: the version yargs prints', t => {
	t.is(printOnly(['--version'], {}), printed(['--version']));
	t.is(printOnly(['-v'], {}), printed(['-v']));
	t.regex(printOnly(['--version'], {}) ?? '', /^\d+\.\d+\.\d+/);
});

test('anything but the flag alone, or a variable of ours, goes through yargs', t => {
	t.is(printOnly(['-w', '2', '--version'], {}), undefined);
	t.is(printOnly(['--help', 'app.js'], {}), undefined);
	t.is(printOnly(['app.js'], {}), undefined);
	t.is(printOnly([], {}), undefined);
	t.is(printOnly(['--version'], {GRACEFUL_CLUSTER_WORKERS: '2'}), undefined);
	t.is(printOnly(['--help'], {GRACEFUL_CLUSTER_HELP: 'true'}), undefined);
});
