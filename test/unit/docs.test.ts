// README is the contract users read: every exit code and every flag must be in it.
import test from 'ava';
import {readFileSync} from 'node:fs';
import path from 'node:path';
import {parseArgs} from '../../src/args.js';
import {EXIT_CODE_MEANINGS, ExitCode} from '../../src/exit-codes.js';
import {ROOT} from '../helpers/cluster.js';

const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');

test('every exit code is in the README table, with its name and the meaning --help prints', t => {
	for (const [name, code] of Object.entries(ExitCode)) {
		const row = new RegExp(`^\\| ${code} \\| \`${name}\` \\| (.+) \\|$`, 'm').exec(readme);
		t.truthy(row, `${name} = ${code}`);
		t.is(row?.[1]?.replaceAll('`', ''), EXIT_CODE_MEANINGS[name as keyof typeof ExitCode], `${name}: README.md and EXIT_CODE_MEANINGS say the same (backticks aside)`);
	}
});

test('every CLI option is in the README options table', t => {
	const help = parseArgs(['--help'], ROOT);
	const flags = [...(help.kind === 'print' ? help.text : '').matchAll(/--([a-z][a-z-]+)/g)].map(match => match[1]!);
	t.true(flags.length > 10);
	const options = readme.slice(readme.indexOf('## Options'), readme.indexOf('## The timeline'));
	for (const flag of new Set(flags)) {
		t.true(options.includes(`--${flag}\``), `--${flag}`);
	}
});

test('the README\'s two commands exist as written', t => {
	const scripts = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts as Record<string, string>;
	t.true(readme.includes('npm ci && npm run example'));
	t.truthy(scripts['example']);
	t.true(readme.includes('\nnpm test\n'));
	t.truthy(scripts['test']);
	t.regex(readFileSync(path.join(ROOT, '.ci/run'), 'utf8'), /^npm test$/m, '.ci/run runs the README\'s test command');
	// `npm ci` builds nothing (no `prepare`: npm 11 would ask tarball users to review it),
	// so both commands build first; `tsc -b` makes that free when nothing changed.
	t.regex(scripts['example']!, /^npm run build && /);
	t.regex(scripts['test']!, /^npm run build && /);
	t.regex(scripts['build']!, /^tsc -b /);
	t.is(scripts['prepare'], undefined);
});

test('every metric of graceful-cluster\'s own is in the README table, with its type, labels and the help Prometheus shows', async t => {
	const {METRICS, PREFIX} = await import('../../src/primary/metrics.js');
	const section = readme.slice(readme.indexOf('## Metrics and status'), readme.indexOf('## Exit codes'));
	const documented = [...section.matchAll(/^\| `(graceful_cluster_\w+)` \|/gm)].map(match => match[1]);
	t.deepEqual(documented, Object.keys(METRICS).map(name => PREFIX + name), 'the same metrics, in the same order');
	for (const [name, spec] of Object.entries(METRICS)) {
		const labels = spec.labels.map(label => `\`${label}\``).join(', ');
		const row = `| \`${PREFIX}${name}\` | ${spec.type} | ${labels}${labels === '' ? '' : ' '}| ${spec.help} |`;
		t.true(section.includes(row), row);
	}
});
