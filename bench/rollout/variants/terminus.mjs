// @godaddy/terminus with a readiness check on /readyz (503 once shutting down).
// TERMINUS_DELAY=1 adds the README's Kubernetes recipe: a 5 s beforeShutdown
// delay ("given your readiness probes run every 5 second") and useExit0.
import http from 'node:http';
import {createTerminus} from '@godaddy/terminus';
import handler from './handler.cjs';

const server = http.createServer(handler.handle);
const delay = process.env.TERMINUS_DELAY === '1';
createTerminus(server, {
	healthChecks: {'/readyz': async () => 'ok'},
	...(delay
		? {
			beforeShutdown: async () => new Promise(resolve => {
				setTimeout(resolve, 5000);
			}),
			useExit0: true,
		}
		: {}),
});
server.listen(handler.port, handler.host);
