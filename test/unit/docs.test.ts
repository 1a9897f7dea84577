// The docs are the contract users read: every exit code, flag and metric is in
// them as the code has it, and every link between the pages leads somewhere.
import test from 'ava';
import {existsSync, readFileSync} from 'node:fs';
import path from 'node:path';
import {parseArgs} from '../../src/args.js';
import {EXIT_CODE_MEANINGS, ExitCode} from '../../src/exit-codes.js';
import {ROOT} from '../helpers/cluster.js';
import {anchors, docFiles, readDoc, relativeLinks, section, slug} from '../helpers/docs.js';

const readme = readDoc('README.md');

test('every exit code is in the README table, with its name and the meaning --help prints', t => {
	for (const [name, code] of Object.entries(ExitCode)) {
		const row = new RegExp(`^\\| ${code} \\| \`${name}\` \\| (.+) \\|$`, 'm').exec(readme);
		t.truthy(row, `${name} = ${code}`);
		t.is(row?.[1]?.replaceAll('`', ''), EXIT_CODE_MEANINGS[name as keyof typeof ExitCode], `${name}: README.md and EXIT_CODE_MEANINGS say the same (backticks aside)`);
	}
});

test('every CLI option is in the README\'s options table and in docs/options.md\'s', t => {
	const help = parseArgs(['--help'], ROOT);
	const flags = [...(help.kind === 'print' ? help.text : '').matchAll(/--([a-z][a-z-]+)/g)].map(match => match[1]!);
	t.true(flags.length > 10);
	const tables = {'README.md': section(readme, '## Options'), 'docs/options.md': section(readDoc('docs/options.md'), '## Flags and variables')};
	for (const [file, options] of Object.entries(tables)) {
		for (const flag of new Set(flags)) {
			t.true(options.includes(`--${flag}\``), `${file}: --${flag}`);
		}
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

test('every metric of graceful-cluster\'s own is in docs/metrics.md\'s table, with its type, labels and the help Prometheus shows', async t => {
	const {METRICS, PREFIX} = await import('../../src/primary/metrics.js');
	const metrics = readDoc('docs/metrics.md');
	const documented = [...metrics.matchAll(/^\| `(graceful_cluster_\w+)` \|/gm)].map(match => match[1]);
	t.deepEqual(documented, Object.keys(METRICS).map(name => PREFIX + name), 'the same metrics, in the same order');
	for (const [name, spec] of Object.entries(METRICS)) {
		const labels = spec.labels.map(label => `\`${label}\``).join(', ');
		const row = `| \`${PREFIX}${name}\` | ${spec.type} | ${labels}${labels === '' ? '' : ' '}| ${spec.help} |`;
		t.true(metrics.includes(row), row);
	}
});

test('anchors are made as GitHub makes them', t => {
	t.is(slug('The timeline after SIGTERM'), 'the-timeline-after-sigterm');
	t.is(slug('4a. Measure the lag instead of guessing it: arrival telemetry and `--adaptive-reject`'), '4a-measure-the-lag-instead-of-guessing-it-arrival-telemetry-and---adaptive-reject');
	t.is(slug('Standalone (plain `node`)'), 'standalone-plain-node');
	t.is(slug('The app\'s own IPC messages'), 'the-apps-own-ipc-messages');
	t.is(slug('HTTP/2'), 'http2');
	t.deepEqual([...anchors('# A\n\n```yaml\n# not a heading\n```\n## B\n## B\n')], ['a', 'b', 'b-1']);
});

test('every relative link and #anchor in README.md and docs/*.md leads somewhere', t => {
	const files = docFiles();
	t.true(files.length > 8, files.join(', '));
	for (const file of files) {
		const links = relativeLinks(readDoc(file));
		for (const link of links) {
			const [target = '', anchor] = link.split('#', 2);
			const resolved = target === '' ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), target));
			if (target !== '') {
				t.true(existsSync(path.join(ROOT, resolved)), `${file}: ${link}: no ${resolved}`);
			}

			if (anchor !== undefined && resolved.endsWith('.md') && existsSync(path.join(ROOT, resolved))) {
				t.true(anchors(readFileSync(path.join(ROOT, resolved), 'utf8')).has(anchor), `${file}: ${link}: ${resolved} has no #${anchor}`);
			}
		}
	}
});
