"""The reviewer page at `/review` (DESIGN.md §10): server-rendered HTML, no script, no front-end build
step. session.py keeps who is reviewing (the signed cookie), rendering.py writes the HTML, forms.py
reads what a form posted, routes.py answers the four routes.

**Signing in.** A person reaches the page through their organisation's portal (an SSO proxy), which
adds the same identity headers an API client sends: a service credential (`Authorization`) and a
signed user context (`x-citadel-user-context`). The first `GET /review` (or `GET /review/session`)
carrying them is verified like any API call (`services.access.caller`) and answered with a session
cookie; later requests need only the cookie. The admission middleware authenticates `/v1/` paths
only, so these routes authenticate themselves.

**The session cookie** (`citadel_review`: HttpOnly, SameSite=Strict, Path=/review, Secure when the
request came over https) is stateless: `v1.<payload>.<mac>`, the payload base64url JSON of service,
tenant, user, groups, expiry and a random CSRF token, the mac HMAC-SHA256 over the payload under a
32-byte key kept in the deployment's home (`<home>/secrets/review_session.key`, 0600, made on first
use, shared by every replica of the home; delete it to end every session). It lives until the user
context's own expiry or one hour, whichever is first; a tampered, expired or unreadable cookie is
refused (401). No credential ever travels in a URL, and the cookie is never logged.

**Deciding.** Each pending task (`services.approvals.review_items`) has a form that posts to
`/review/{approval_id}/decide` with the session's CSRF token; a post is refused (403, nothing
decided) without the cookie's session, with a missing or wrong token, or with an `Origin`/`Referer`
from another host. Edited fields are converted to the types the task lists (a bad number is the
422 page). The decision goes through `services.approvals.decide`, so the policy engine judges an
edit exactly as over the JSON API (a reviewer cannot exceed their limit); its refusals (403, 404,
409, 422) come back as the page with the message, never a 500. A decision ends in a redirect to
`/review?result=<code>&id=<approval_id>`, the code rendered from a fixed table (no free text in a
URL); a honeypot's message, which the reviewer must see at once, is rendered directly.

Every value placed in the HTML goes through `html.escape`; every response carries a strict
Content-Security-Policy (no script at all), `X-Frame-Options: DENY` and `Cache-Control: no-store`.
The routes are left out of the OpenAPI document: they are a page, not the API.
"""


