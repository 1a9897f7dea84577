// `npm ci` on the oldest Node the project supports prints no EBADENGINE warning: every
// package the lockfile installs (the devDependencies' too) accepts that Node, as npm
// checks it (npm-install-checks), and the Node running the tests.
import test from 'ava';
import {readFileSync} from 'node:fs';
import path from 'node:path';
import semver from 'semver';
import {ROOT} from '../helpers/cluster.js';

interface Lock {
	packages: Record<string, {version?: string; engines?: Record<string, string> | string[]}>;
}

const own = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {engines: {node: string}}).engines.node;
const lock = JSON.parse(readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as Lock;

test('every package in package-lock.json accepts the oldest Node graceful-cluster supports, and this one', t => {
	const oldest = semver.minVersion(own)!.version;
	t.true(semver.satisfies(process.version, own), `the tests run on Node ${process.version}, outside ${own}`);
	let checked = 0;
	for (const [where, entry] of Object.entries(lock.packages)) {
		const wanted = Array.isArray(entry.engines) ? undefined : entry.engines?.['node'];
		if (where === '' || wanted === undefined) {
			continue;
		}

		checked++;
		for (const node of [oldest, process.version]) {
			t.true(semver.satisfies(node, wanted, {includePrerelease: true}), `${where}@${entry.version ?? '?'} wants Node ${wanted}: npm ci on Node ${node} warns EBADENGINE`);
		}
	}

	t.true(checked > 50, `${checked} packages name a Node version`);
});
