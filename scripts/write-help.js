// Writes dist/src/help.txt: `graceful-cluster --help` as yargs prints it at full
// width, in English, with no GRACEFUL_CLUSTER_* variable set. src/print-only.ts
// answers a plain --help with it, without loading yargs. Run by bundle.js in
// `npm run build`, after tsc, so the file always matches the options of the same
// build (and the bundle copies it beside its own code).
import {writeFileSync} from 'node:fs';
import process from 'node:process';
import {helpText} from '../dist/src/args.js';
import {HELP_FILE} from '../dist/src/package-files.js';

for (const key of Object.keys(process.env)) {
	if (key.startsWith('GRACEFUL_CLUSTER_')) {
		delete process.env[key];
	}
}

// yargs picks its locale from the first of these set.
for (const key of ['LC_MESSAGES', 'LANG', 'LANGUAGE']) {
	delete process.env[key];
}

process.env.LC_ALL = 'en_US';
writeFileSync(HELP_FILE, helpText());
