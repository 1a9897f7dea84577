// The app under pm2-runtime in cluster mode, with pm2's documented graceful
// shutdown: pm2 sends SIGINT, the app closes its server and exits.
'use strict';
const http = require('node:http');
const handler = require('./handler.cjs');

const server = http.createServer(handler.handle).listen(handler.port, handler.host);
process.on('SIGINT', () => {
	server.close(() => {
		process.exit(0);
	});
});
