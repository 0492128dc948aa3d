"""The typed tuning sets the in-box brain's tool choice was tuned on (none of them in bench/conversation_tools.py's
held-out REQUESTS or in the tests). Each set: (tools, requests), a tool as (name, description, parameters), a
request as (words, the tool it needs or "" for none).

A is the first probe's set (bench/results/tools-2026-11-29/choice_probe.py, 30 requests, 10 needing a tool).
B is new (2026-11-30): 48 requests over three tool sets of their own (11 tools, descriptions written in different
styles, some parameters described), half needing a tool; the requests that need none include some on the tools'
topics ("What does a stockbroker do?").
C was written after A and B had picked the method and its one setting, to check them (32 requests over two more tool
sets, half needing a tool); nothing was chosen on it, but its misses were read before D was written.
D was written before any talk frame of the second round (analyse.py) was measured, and read only for the one picked.
"""

from __future__ import annotations

WEATHER = ("get_weather", "Get the current weather in a city.", {"city": {"type": "string"}})
BOOK = (
    "book_table",
    "Book a table at the restaurant for a number of people at a time.",
    {"people": {"type": "integer"}, "time": {"type": "string"}},
)
TIMER = ("set_timer", "Start a kitchen timer for a number of minutes.", {"minutes": {"type": "integer"}})

A = (
    [WEATHER, BOOK, TIMER],
    [
        ("What's the weather in Paris?", "get_weather"),
        ("Is it raining in London right now?", "get_weather"),
        ("How hot is it in Madrid today?", "get_weather"),
        ("Can you book a table for four people at eight tonight?", "book_table"),
        ("I'd like a table for two at seven.", "book_table"),
        ("Reserve a table for six people tomorrow at noon.", "book_table"),
        ("Set a timer for ten minutes.", "set_timer"),
        ("Start a five minute timer please.", "set_timer"),
        ("Remind me in twenty minutes with a timer.", "set_timer"),
        ("What is the temperature in Tokyo?", "get_weather"),
        *(
            (w, "")
            for w in [
                "Tell me a joke.",
                "What is the capital of France?",
                "How are you today?",
                "Who wrote Romeo and Juliet?",
                "What's a good name for a cat?",
                "Can you say that again?",
                "Thank you, that's all.",
                "What does photosynthesis mean?",
                "How many legs does a spider have?",
                "Give me a tip for sleeping better.",
                "Who was the first person on the moon?",
                "Who built the Eiffel Tower?",
                "What is the capital of Spain?",
                "Who discovered penicillin?",
                "What language do they speak in Brazil?",
                "Tell me something interesting about octopuses.",
                "Why is the sky blue?",
                "What's your favorite color?",
                "Who invented the telephone?",
                "How tall is Mount Everest?",
            ]
        ),
    ],
)

HOME = [
    (
        "switch_lights",
        "Turn the lights on or off in a room of the house.",
        {"room": {"type": "string", "description": "the room"}, "on": {"type": "boolean"}},
    ),
    ("play_music", "Play a song, an artist or a playlist.", {"query": {"type": "string"}}),
    (
        "set_thermostat",
        "Set the heating to a temperature.",
        {"celsius": {"type": "number", "description": "the temperature wanted, in degrees Celsius"}},
    ),
]
ERRANDS = [
    ("send_message", "Send a text message to a contact.", {"to": {"type": "string"}, "text": {"type": "string"}}),
    ("add_to_list", "Add an item to the shopping list.", {"item": {"type": "string"}}),
    (
        "get_directions",
        "Find the route to a place by car, bike or on foot.",
        {"destination": {"type": "string"}, "mode": {"type": "string", "enum": ["car", "bike", "foot"]}},
    ),
    (
        "convert_currency",
        "Convert an amount of money from one currency to another.",
        {"amount": {"type": "number"}, "source": {"type": "string"}, "target": {"type": "string"}},
    ),
]
OFFICE = [
    (
        "get_stock_price",
        "Returns the latest trading price of a stock given its ticker symbol.",
        {"symbol": {"type": "string", "description": "ticker symbol, e.g. AAPL"}},
    ),
    (
        "create_event",
        "Creates an event in the user's calendar with a title, date and time.",
        {"title": {"type": "string"}, "date": {"type": "string"}, "time": {"type": "string"}},
    ),
    (
        "translate",
        "Translates a piece of text into a target language.",
        {"text": {"type": "string"}, "language": {"type": "string"}},
    ),
    (
        "order_taxi",
        "Call a taxi to pick the user up.",
        {"pickup": {"type": "string"}, "destination": {"type": "string"}},
    ),
]

B = [
    (
        HOME,
        [
            ("Switch off the lights in the kitchen.", "switch_lights"),
            ("Can you make the bedroom brighter?", "switch_lights"),
            ("Lights off in the living room please.", "switch_lights"),
            ("Put on some jazz.", "play_music"),
            ("I want to hear the Beatles.", "play_music"),
            ("Play my workout playlist.", "play_music"),
            ("It's freezing in here, warm the house up to twenty two degrees.", "set_thermostat"),
            ("Turn the heating down to eighteen.", "set_thermostat"),
            ("What rhymes with orange?", ""),
            ("How far away is the sun?", ""),
            ("Who composed the Four Seasons?", ""),
            ("Tell me a short story about a dragon.", ""),
            ("What's the difference between a frog and a toad?", ""),
            ("I had a long day at work.", ""),
            ("Do you like music?", ""),
            ("How do you say thank you in Japanese?", ""),
        ],
    ),
    (
        ERRANDS,
        [
            ("Text Maria that I'll be late.", "send_message"),
            ("Tell my brother I'm on my way.", "send_message"),
            ("We're out of milk, put it on the list.", "add_to_list"),
            ("Add eggs and flour to my groceries.", "add_to_list"),
            ("How do I get to the train station from here?", "get_directions"),
            ("What's the fastest way to the airport by bike?", "get_directions"),
            ("How much is fifty dollars in euros?", "convert_currency"),
            ("Change a hundred pounds into yen.", "convert_currency"),
            ("Who was Napoleon?", ""),
            ("What's the meaning of life?", ""),
            ("Recite a short poem about autumn.", ""),
            ("Why do we yawn?", ""),
            ("What's your name?", ""),
            ("How many days are in a leap year?", ""),
            ("I'm bored, say something funny.", ""),
            ("Is a tomato a fruit or a vegetable?", ""),
        ],
    ),
    (
        OFFICE,
        [
            ("What's Apple trading at?", "get_stock_price"),
            ("How is Tesla stock doing today?", "get_stock_price"),
            ("Put a dentist appointment in my calendar for Friday at ten.", "create_event"),
            ("Schedule a meeting with Sam tomorrow at three.", "create_event"),
            ("Translate where is the library into French.", "translate"),
            ("How do you say good night in Spanish?", "translate"),
            ("I need a cab to the airport.", "order_taxi"),
            ("Get me a taxi home from the cinema.", "order_taxi"),
            ("What does a stockbroker do?", ""),
            ("When was the calendar invented?", ""),
            ("Who is the richest person in history?", ""),
            ("Can you help me think of a birthday gift for my dad?", ""),
            ("What is the tallest animal?", ""),
            ("Tell me about the Roman Empire.", ""),
            ("Good night, talk to you tomorrow.", ""),
            ("Which planet has the most moons?", ""),
        ],
    ),
]

TRAVEL = [
    (
        "get_weather",
        "Tells the weather for a place and a day.",
        {"place": {"type": "string"}, "day": {"type": "string"}},
    ),
    (
        "find_flights",
        "Search flights between two cities on a date.",
        {"origin": {"type": "string"}, "destination": {"type": "string"}, "date": {"type": "string"}},
    ),
    ("set_alarm", "Wake the user up at a time with an alarm.", {"time": {"type": "string"}}),
]
HOUSEHOLD = [
    ("log_water", "Record a glass of water the user drank.", {"glasses": {"type": "integer"}}),
    (
        "find_recipe",
        "Look up how to cook a dish, with its ingredients and steps.",
        {"dish": {"type": "string", "description": "the dish or its main ingredients"}},
    ),
    ("call_contact", "Phone someone from the user's contacts.", {"name": {"type": "string"}}),
]
C = [
    (
        TRAVEL,
        [
            ("Will it be sunny in Rome on Saturday?", "get_weather"),
            ("What's it like outside in Vienna?", "get_weather"),
            ("Is there snow in Oslo today?", "get_weather"),
            ("Find me a flight from Paris to New York next Monday.", "find_flights"),
            ("Are there any planes to Lisbon on Friday?", "find_flights"),
            ("Wake me up at six thirty.", "set_alarm"),
            ("I need to get up at seven tomorrow, set an alarm.", "set_alarm"),
            ("How hot will it get in Athens this weekend?", "get_weather"),
            ("What's the longest river in Africa?", ""),
            ("Who painted the Starry Night?", ""),
            ("How do airplanes stay in the air?", ""),
            ("What's a good book for a long flight?", ""),
            ("Tell me a riddle.", ""),
            ("I'm feeling a bit sad today.", ""),
            ("What time zone is Japan in?", ""),
            ("Nice to meet you!", ""),
        ],
    ),
    (
        HOUSEHOLD,
        [
            ("I just drank a glass of water.", "log_water"),
            ("Log two glasses of water for me.", "log_water"),
            ("How do I cook a risotto?", "find_recipe"),
            ("Give me a recipe for pancakes.", "find_recipe"),
            ("Find me something to cook with chicken and rice.", "find_recipe"),
            ("Call my mom.", "call_contact"),
            ("Ring Peter please.", "call_contact"),
            ("Phone the office.", "call_contact"),
            ("What vitamins are in an orange?", ""),
            ("Why do onions make you cry?", ""),
            ("Who was Marie Curie?", ""),
            ("How much water should a person drink a day?", ""),
            ("What's two plus two?", ""),
            ("Tell me something nice.", ""),
            ("Who are you?", ""),
            ("What is the speed of light?", ""),
        ],
    ),
]

MONEY = [
    (
        "check_balance",
        "Read the balance of the user's bank account.",
        {"account": {"type": "string", "enum": ["checking", "savings"]}},
    ),
    ("pay_bill", "Pay a bill from the user's account.", {"payee": {"type": "string"}, "amount": {"type": "number"}}),
    ("get_news", "Get the latest news headlines on a topic.", {"topic": {"type": "string"}}),
]
MEDIA = [
    (
        "set_volume",
        "Change the speaker volume to a level from 0 to 10.",
        {"level": {"type": "integer", "minimum": 0, "maximum": 10}},
    ),
    ("read_audiobook", "Continue reading the user's audiobook.", {}),
    ("start_workout", "Start tracking a workout such as a run, a ride or a swim.", {"kind": {"type": "string"}}),
]
D = [
    (
        MONEY,
        [
            ("How much money do I have in savings?", "check_balance"),
            ("What's left in my checking account?", "check_balance"),
            ("Check my account balance.", "check_balance"),
            ("Pay the electricity bill, it's sixty dollars.", "pay_bill"),
            ("Send forty euros to the water company for the bill.", "pay_bill"),
            ("What's happening in the news today?", "get_news"),
            ("Any headlines about football?", "get_news"),
            ("Did anything big happen in politics this morning?", "get_news"),
            ("What is inflation?", ""),
            ("How do banks make money?", ""),
            ("Who was Albert Einstein?", ""),
            ("Say hi to my kids!", ""),
            ("I love you.", ""),
            ("Can you count to five?", ""),
            ("What's the opposite of hot?", ""),
            ("Where do penguins live?", ""),
        ],
    ),
    (
        MEDIA,
        [
            ("Turn it up a bit, to seven.", "set_volume"),
            ("That's too loud, volume three please.", "set_volume"),
            ("Mute the speaker.", "set_volume"),
            ("Let's go on with my book.", "read_audiobook"),
            ("Keep reading where we stopped.", "read_audiobook"),
            ("I'm going for a run now, track it.", "start_workout"),
            ("Start a swim session.", "start_workout"),
            ("Log my bike ride starting now.", "start_workout"),
            ("How many calories does running burn?", ""),
            ("Who wrote Pride and Prejudice?", ""),
            ("What's louder, a lion or an elephant?", ""),
            ("Good evening!", ""),
            ("Why is exercise healthy?", ""),
            ("What are you doing?", ""),
            ("Which is heavier, a kilo of feathers or a kilo of steel?", ""),
            ("Sing me a song.", ""),
        ],
    ),
]

SETS = {"A": [A], "B": B, "C": C, "D": D}
