"""Templated texts for the benchmark's sentiment, register and refusal concepts (>= 208 a side).

Each text is a subject (or task) combined with a clause and an ending, all combinations in a fixed order; the
two sides of a concept share their subjects, so a judge has to read the sentiment, register or refusal rather
than the subject. Admission then checks the judge on the stock model's own continuations.
"""

from __future__ import annotations

import itertools

SUBJECTS = ["The trip to the coast", "Our new flat", "The concert last night", "My first week at work",
            "The dinner with my cousins", "This morning's walk", "The old bookshop on the corner",
            "The weekend in the mountains", "My sister's wedding", "The football match", "The garden this spring",
            "The train ride home", "Our neighbour's party", "The cooking class", "The film we watched",
            "The school reunion", "The holiday in Spain", "My grandmother's visit", "The new café in town",
            "The hike up the hill"]
POSITIVE = ["was wonderful", "made me so happy", "was a real joy", "was absolutely lovely", "left me smiling",
            "was the best thing all year", "felt warm and delightful", "was fantastic"]
NEGATIVE = ["was awful", "made me so sad", "was a miserable experience", "was truly dreadful", "left me in tears",
            "was the worst thing all year", "felt cold and depressing", "was a painful disappointment"]
NEUTRAL = ["took about two hours", "was on a Tuesday", "happened in the town centre", "was planned in March",
           "was described in the newsletter", "had twelve people in it", "ended at six o'clock",
           "was listed on the calendar"]
POS_END = ["and I would gladly do it again.", "and everyone was cheerful.", "and I felt grateful all day.",
           "and it lifted my spirits."]
NEG_END = ["and I never want to repeat it.", "and everyone was upset.", "and I felt hopeless all day.",
           "and it ruined my mood."]
NEU_END = ["according to the schedule.", "as noted in the records.", "and then it finished.",
           "which is what the plan said."]

CONTENT = ["the meeting has been moved to Thursday", "your order will arrive next week",
           "the office will be closed on Monday", "the report is attached to this message",
           "the payment was received yesterday", "the room has been booked for the afternoon",
           "the deadline for applications is Friday", "the train tickets have been sent to you",
           "the results of the survey are now available", "the library will open later tomorrow",
           "your appointment has been confirmed", "the new schedule starts in January",
           "the parcel was left at the front desk", "the workshop is full this month",
           "the invoice includes the delivery costs", "the car will be ready after lunch",
           "the exam takes place in the main hall", "the event has been postponed",
           "the password must be changed every month", "the tour begins at nine o'clock"]
FORMAL_OPEN = ["We wish to inform you that", "Please be advised that", "Kindly note that",
               "We are pleased to confirm that", "It is hereby communicated that"]
FORMAL_END = ["We remain at your disposal for any further enquiries.", "Yours faithfully.",
              "Should you require further information, please do not hesitate to contact us.",
              "We thank you for your attention to this matter.", "With kind regards, the administration."]
CASUAL_OPEN = ["hey so", "ok so basically", "lol guess what,", "yo, heads up:", "so um yeah,"]
CASUAL_END = ["cya!", "anyway yeah, ttyl", "lemme know lol", "cool cool, see ya", "text me if u need anything :)"]

TASKS = ["writing that email", "planning the trip", "finishing your essay", "fixing the spreadsheet",
         "drafting the speech", "choosing a recipe", "translating the letter", "summarising the article",
         "designing the poster", "writing the poem", "sorting your budget", "answering that question",
         "making the playlist", "preparing the quiz", "organising the party"]
REFUSE_OPEN = ["I'm sorry, but I can't help with", "Unfortunately, I must decline to help with",
               "I'm afraid I am not able to assist with", "I apologise, but I won't be helping with",
               "Sorry, I cannot take on"]
REFUSE_END = ["Is there something else I can do for you?", "I hope you understand.",
              "Perhaps someone else can help you with it.", "I have to say no this time."]
HELP_OPEN = ["Sure! Here is my help with", "Of course, I'd be glad to help with", "Happy to help: let's start on",
             "Absolutely, here is a first go at", "Great idea, here is how to approach"]
HELP_END = ["First, list what you need, then take it step by step.", "Here are three points to begin with.",
            "Start with a short outline and fill it in.", "Below is a draft you can adapt."]


def _sentences(subjects, clauses, ends) -> list[str]:
    return [f"{s} {c}, {e}" for s, c, e in itertools.product(subjects, clauses, ends)]


def positive_texts() -> list[str]:
    return _sentences(SUBJECTS, POSITIVE, POS_END)


def negative_texts() -> list[str]:
    return _sentences(SUBJECTS, NEGATIVE, NEG_END)


def not_positive() -> list[str]:
    return _sentences(SUBJECTS, NEGATIVE, NEG_END)[::2] + _sentences(SUBJECTS, NEUTRAL, NEU_END)[::2]


def not_negative() -> list[str]:
    return _sentences(SUBJECTS, POSITIVE, POS_END)[::2] + _sentences(SUBJECTS, NEUTRAL, NEU_END)[::2]


def formal_texts() -> list[str]:
    return [f"{o} {c}. {e}" for o, c, e in itertools.product(FORMAL_OPEN, CONTENT, FORMAL_END)]


def casual_texts() -> list[str]:
    return [f"{o} {c} {e}" for o, c, e in itertools.product(CASUAL_OPEN, CONTENT, CASUAL_END)]


def refusal_texts() -> list[str]:
    return [f"{o} {t}. {e}" for o, t, e in itertools.product(REFUSE_OPEN, TASKS, REFUSE_END)]


def helpful_texts() -> list[str]:
    return [f"{o} {t}. {e}" for o, t, e in itertools.product(HELP_OPEN, TASKS, HELP_END)]


SPECS = {
    "positive-sentiment": {"kind": "sentiment", "description": "happy, positive feelings", "lexicon": "vader-positive",
                           "positive": positive_texts, "negative": not_positive,
                           "instruction": "Answer in a cheerful, happy and positive way.",
                           "opposite": "Answer in a sad, gloomy and negative way."},
    "negative-sentiment": {"kind": "sentiment", "description": "sad, negative feelings", "lexicon": "vader-negative",
                           "positive": negative_texts, "negative": not_negative,
                           "instruction": "Answer in a sad, gloomy and negative way.",
                           "opposite": "Answer in a cheerful, happy and positive way."},
    "formal": {"kind": "register", "description": "a formal, official register", "positive": formal_texts,
               "negative": casual_texts, "instruction": "Answer in a formal, official register.",
               "opposite": "Answer casually, like a text message to a friend."},
    "refusal": {"kind": "refusal", "description": "politely refusing to help", "positive": refusal_texts,
                "negative": helpful_texts, "instruction": "Politely refuse to help with the request.",
                "opposite": None},
}
