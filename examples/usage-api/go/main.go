// Command post_usage posts usage events to an awsmp-metering usage API, signed with
// SigV4 (service execute-api) by the AWS SDK for Go v2's signer.
//
//	go mod tidy   # once: resolves the SDK's modules and writes go.sum
//	AWS_REGION=us-east-1 go run . "$USAGE_API_URL" events.json
//
// events.json holds a JSON list of events ({"id", "licenseArn", "customerAWSAccountId",
// "dimension", "quantity", optional "timestamp", "tags" or "usageAllocations"}).
// Credentials come from the SDK's default chain (config.LoadDefaultConfig: environment,
// profile, SSO, web identity, container or instance role). Prints the API's answer (a
// verdict per event, in order) and exits 1 unless every event was accepted or a
// duplicate of an earlier write. Retrying after a timeout or a 503 is safe: events
// already written answer "duplicate".
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
)

const usage = `usage: go run . USAGE_API_URL events.json
  (region from AWS_REGION or AWS_DEFAULT_REGION, default us-east-1;
   credentials from the AWS SDK's default chain)`

// answer is the part of the API's answer this client reads: a verdict per event.
type answer struct {
	Results []struct {
		Status string `json:"status"`
	} `json:"results"`
}

// fail stops with message on stderr and exit status 1.
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// postUsage POSTs events (at most 100) to url/usage/events; returns the answer's JSON.
func postUsage(ctx context.Context, url, region string, events []json.RawMessage, attempts int) []byte {
	body, err := json.Marshal(map[string]any{"events": events})
	if err != nil {
		fail("encoding the events: %v", err)
	}
	digest := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(digest[:])
	target := strings.TrimRight(url, "/") + "/usage/events"

	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		fail("loading the AWS configuration: %v", err)
	}
	signer := v4.NewSigner()
	client := &http.Client{Timeout: 30 * time.Second}
	for attempt := 0; attempt < attempts; attempt++ {
		// Retrieved and signed anew on each attempt: a signature is valid for 15
		// minutes, and a role's credentials are refreshed by the provider's cache.
		credentials, err := cfg.Credentials.Retrieve(ctx)
		if err != nil {
			fail("no AWS credentials found (environment, profile or role): %v", err)
		}
		request, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			fail("POST %s: %v", target, err)
		}
		request.Header.Set("content-type", "application/json")
		if err := signer.SignHTTP(ctx, credentials, request, payloadHash, "execute-api", region, time.Now()); err != nil {
			fail("signing POST %s: %v", target, err)
		}
		response, err := client.Do(request)
		if err != nil {
			fail("POST %s: %v", target, err)
		}
		text, err := io.ReadAll(response.Body)
		response.Body.Close()
		if err != nil {
			fail("reading the answer of POST %s: %v", target, err)
		}
		if response.StatusCode >= 200 && response.StatusCode < 300 {
			return text
		}
		// 429 (the API's throttling) and 503 (the table's): the whole batch again.
		throttled := response.StatusCode == http.StatusTooManyRequests ||
			response.StatusCode == http.StatusServiceUnavailable
		if throttled && attempt+1 < attempts {
			seconds, err := strconv.ParseFloat(response.Header.Get("retry-after"), 64)
			if err != nil {
				seconds = float64(int(1) << attempt)
			}
			time.Sleep(time.Duration(seconds * float64(time.Second)))
			continue
		}
		fail("usage API answered %d: %s", response.StatusCode, text)
	}
	fail("usage API kept throttling")
	return nil
}

func main() {
	if len(os.Args) != 3 {
		fail("%s", usage)
	}
	file, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail("%v", err)
	}
	var events []json.RawMessage
	if err := json.Unmarshal(file, &events); err != nil {
		fail("%s: a JSON list of events expected: %v", os.Args[2], err)
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	if region == "" {
		region = "us-east-1"
	}
	text := postUsage(context.Background(), os.Args[1], region, events, 5)
	var compact bytes.Buffer
	if err := json.Compact(&compact, text); err != nil {
		fail("the usage API answered no JSON (%v): %s", err, text)
	}
	fmt.Println(compact.String())
	var verdicts answer
	if err := json.Unmarshal(text, &verdicts); err != nil {
		fail("the usage API's answer has no results: %v", err)
	}
	for _, result := range verdicts.Results {
		if result.Status != "accepted" && result.Status != "duplicate" {
			os.Exit(1)
		}
	}
}
