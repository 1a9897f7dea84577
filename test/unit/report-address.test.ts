// Where a user told to report a bug can do it: package.json names the repository, its
// page and its issues (npm shows them on the package's page), and every text that asks
// for a report (exit code 1's meaning, the CLI's and the primary's crash lines, README
// and docs) names the same issues address.
import test from 'ava';
import {readdirSync, readFileSync} from 'node:fs';
import path from 'node:path';
import {ROOT} from '../helpers/cluster.js';

interface Manifest {
	repository?: {type?: string; url?: string};
	homepage?: string;
	bugs?: {url?: string};
}

const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as Manifest;

/** Every file under `dir` (relative to ROOT) whose name ends with `extension`. */
function filesUnder(dir: string, extension: string): string[] {
	return readdirSync(path.join(ROOT, dir), {recursive: true, encoding: 'utf8'})
		.filter(file => file.endsWith(extension))
		.map(file => path.join(dir, file));
}

test('package.json names the repository, its page and where to report a bug, all on one repository', t => {
	const issues = manifest.bugs?.url ?? '';
	t.regex(issues, /^https:\/\/github\.com\/[\w.-]+\/[\w.-]+\/issues$/);
	const repository = issues.replace(/\/issues$/, '');
	t.deepEqual(manifest.repository, {type: 'git', url: `git+${repository}.git`});
	t.is(manifest.homepage, `${repository}#readme`);
});

test('every text that asks for a bug report says where: package.json\'s bugs address', t => {
	const issues = manifest.bugs!.url!;
	const files = ['README.md', ...filesUnder('docs', '.md'), ...filesUnder('src', '.ts')];
	let asks = 0;
	for (const file of files) {
		const lines = readFileSync(path.join(ROOT, file), 'utf8').split('\n');
		for (const [index, line] of lines.entries()) {
			if (/please report/i.test(line)) {
				asks++;
				t.true(new RegExp(`please report (it|this) at ${issues.replaceAll('.', '\\.')}`, 'i').test(line), `${file}:${index + 1} asks for a report without saying where: ${line.trim()}`);
			}
		}
	}
	// exit-codes.ts, cli.ts, main.ts (twice), README.md, docs/logs.md.
	t.true(asks >= 6, `found ${asks} requests for a report`);
});
