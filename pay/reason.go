package pay

import (
	"fmt"
	"regexp"
	"strings"
)

// History reasons and review reasons are public: GET /v1/payments/{id}
// shows them, and the outbox publishes them. Each is "code: text", where
// the code is one of the Reason* codes below and the text is safe to show
// anyone: no URL, address or Go error. The raw cause goes to the log.
const (
	ReasonApproved        = "approved"              // the institution approved the payment
	ReasonDeclined        = "declined"              // the institution declined the payment
	ReasonBulkheadFull    = "bulkhead_full"         // too many approvals in flight: not sent
	ReasonNotSent         = "not_sent"              // the approval could not be sent: nothing happened
	ReasonRejected        = "rejected"              // the institution refused the request without processing it
	ReasonApprovalTimeout = "approval_timeout"      // no answer within the approval timeout: the money may have moved
	ReasonOutcomeUnknown  = "outcome_unknown"       // the answer was lost or an error: the money may have moved
	ReasonInquiryApproved = "inquiry_approved"      // a status inquiry found the payment approved
	ReasonInquiryDeclined = "inquiry_declined"      // a status inquiry found the payment declined
	ReasonInquiryNotFound = "inquiry_not_found"     // not found after the institution's not-found window
	ReasonRecovered       = "recovered"             // PENDING past its approval timeout (a crash, a failed write): taken over
	ReasonReviewUnsettled = "unsettled"             // flagged: status inquiries could not settle it
	ReasonWithheld        = "withheld"              // an old reason with internals in it, not shown
	ReasonRefunded        = "refunded"              // the institution carried the refund out
	ReasonRefundDeclined  = "refund_declined"       // the institution declined the refund
	ReasonInquiryRefunded = "inquiry_refunded"      // a status inquiry found the refund carried out
	ReasonAuthorized      = "authorized"            // the institution authorised a manual-capture payment
	ReasonCaptured        = "captured"              // the institution captured the authorisation
	ReasonVoided          = "voided"                // the institution cancelled the authorisation
	ReasonOpDeclined      = "operation_declined"    // the institution declined a capture or void
	ReasonInquiryDone     = "inquiry_succeeded"     // a status inquiry found the capture or void carried out
	ReasonAuthExpired     = "authorization_expired" // not captured within the authorisation window: voided by the service
	ReasonCancelRequested = "cancel_requested"      // a cancellation was recorded; it waits for the payment to settle
	ReasonCancelVoid      = "cancel_void"           // a cancellation was carried out as a void
	ReasonCancelRefund    = "cancel_refund"         // a cancellation was carried out as a refund
	ReasonCancelNothing   = "cancel_nothing_to_do"  // a cancellation closed: no money was taken, or none is left
)

// reasonCodes are the codes a public reason may start with.
var reasonCodes = map[string]bool{
	ReasonCreated: true, ReasonApproved: true, ReasonDeclined: true, ReasonBulkheadFull: true, ReasonNotSent: true,
	ReasonRejected: true, ReasonApprovalTimeout: true, ReasonOutcomeUnknown: true, ReasonInquiryApproved: true,
	ReasonInquiryDeclined: true, ReasonInquiryNotFound: true, ReasonRecovered: true, ReasonReviewUnsettled: true,
	ReasonWithheld: true, ReasonRefunded: true, ReasonRefundDeclined: true, ReasonInquiryRefunded: true,
	ReasonAuthorized: true, ReasonCaptured: true, ReasonVoided: true, ReasonOpDeclined: true, ReasonInquiryDone: true,
	ReasonAuthExpired: true, ReasonCancelRequested: true, ReasonCancelVoid: true, ReasonCancelRefund: true,
	ReasonCancelNothing: true,
}

// reason formats a public reason: code, then safe text.
func reason(code, format string, args ...any) string {
	return code + ": " + fmt.Sprintf(format, args...)
}

// ReasonCode returns the code of a public reason: the part before ": ",
// or the whole reason when it is a bare code (ReasonCreated). A reason
// that does not start with a known code, such as one stored before
// reasons had codes, gives the code SafeReason would show.
func ReasonCode(r string) string {
	r = SafeReason(r)
	code, _, _ := strings.Cut(r, ": ")
	return code
}

// legacyReasons translate the reasons stored before they carried codes;
// some of them quoted Go errors with the institution's URL. The safe
// parts (attempt counts) are kept.
var legacyReasons = []struct {
	re   *regexp.Regexp
	code string
	text string // with $1 for the first group
}{
	{regexp.MustCompile(`^approved \(attempt (\d+)\)$`), ReasonApproved, "the institution approved it (attempt $1)"},
	{regexp.MustCompile(`^declined \(attempt (\d+)\)$`), ReasonDeclined, "the institution declined it (attempt $1)"},
	{regexp.MustCompile(`^bulkhead full`), ReasonBulkheadFull, "too many approvals were in flight; the request was not sent"},
	{regexp.MustCompile(`^not sent`), ReasonNotSent, "the request could not be sent to the institution; nothing was charged"},
	{regexp.MustCompile(`^rejected by the institution`), ReasonRejected, "the institution refused the request without processing it"},
	{regexp.MustCompile(`(?s)^outcome unknown after (\d+) attempt\(s\):.*(context deadline exceeded|Client\.Timeout exceeded|i/o timeout)`), ReasonApprovalTimeout, "the institution did not answer in time (after $1 attempt(s)); the money may have moved"},
	{regexp.MustCompile(`^outcome unknown after (\d+) attempt\(s\)`), ReasonOutcomeUnknown, "the institution's answer was lost (after $1 attempt(s)); the money may have moved"},
	{regexp.MustCompile(`^status inquiry: approved`), ReasonInquiryApproved, "a status inquiry found it approved"},
	{regexp.MustCompile(`^status inquiry: declined`), ReasonInquiryDeclined, "a status inquiry found it declined"},
	{regexp.MustCompile(`^status inquiry: not found`), ReasonInquiryNotFound, "a status inquiry did not find it after the institution's not-found window"},
	{regexp.MustCompile(`^recovered at start-up`), ReasonRecovered, "PENDING when the service started; the call may have reached the institution"},
	{regexp.MustCompile(`^still UNKNOWN after (\d+) status inquiries`), ReasonReviewUnsettled, "still UNKNOWN after $1 status inquiries"},
}

// SafeReason returns a stored reason as the API shows it: a reason with a
// known code as it is; an older reason translated to its code and safe
// text; anything else withheld, since it may hold internals.
func SafeReason(r string) string {
	code, _, _ := strings.Cut(r, ": ")
	if reasonCodes[code] {
		return r
	}
	for _, l := range legacyReasons {
		if m := l.re.FindStringSubmatchIndex(r); m != nil {
			return l.code + ": " + string(l.re.ExpandString(nil, l.text, r, m))
		}
	}
	return ReasonWithheld + ": the stored reason is not shown; see the service's logs"
}
